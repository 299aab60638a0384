"""What a zipapp holds where, and its __main__.py, which runs the bootstrap's modules.

Shared by the builder (which writes these entries) and the bootstrap (which reads
them); standard library only, as every module of the bootstrap.
"""

from __future__ import annotations

__all__ = ["BOOT_DATA", "BUILD_INFO", "CODE", "MAIN", "PARTS", "SITE", "SOURCE"]

BUILD_INFO = "_shipyard/build.json"
# The bootstrap's modules in the order __main__.py runs them, each importing only the
# ones before it; the last, `boot`, is the package itself (its __init__.py).
PARTS = ("layout", "host", "trust", "folders", "extract", "cache", "boot")
# Where a part's source is.
SOURCE = "_shipyard/%s.py"
# The bootstrap compiled for one interpreter, named by that interpreter's magic number:
# the code of every part, in order, as one tuple (one entry to read on every start).
CODE = "_shipyard/boot-%s.bin"
# What the bootstrap reads: the build info as marshal format 2 (readable by every
# Python 3, so even a wrong interpreter gets the message; json would import re).
BOOT_DATA = "_shipyard/boot.marshal"
SITE = "site"
# The archive's __main__.py. Python compiles it twice on every start (zipimport asks
# for the file name, then the code), so it is kept tiny: it runs the bootstrap's
# modules, as the package `_shipyard_boot`, from code compiled at build time when the
# interpreter matches, else from source. It must compile on every Python from 2.7 on
# (no f-strings, annotations or walrus) so that an older one than the bootstrap
# compiles on (3.7: `from __future__ import annotations`) gets check_target's one
# line and exit status 2 instead of a SyntaxError traceback: the rest of the
# bootstrap is compiled only after that check.
MAIN = """\
import sys
if sys.version_info < (3, 7):
    def _old():
        import json, os, zipimport
        archive = os.path.dirname(os.path.abspath(__file__))
        name, want = os.path.basename(archive), "3"
        try:
            data = zipimport.zipimporter(archive).get_data("_shipyard/build.json")
            info = json.loads(data.decode("utf-8"))
            name, want = info["binary"], info["python"]
        except Exception:
            pass
        have = "%d.%d.%d" % tuple(sys.version_info[:3])
        sys.stderr.write("%s: built for Python %s, but this is Python %s (%s); run it with "
                         "python%s\\n" % (name, want, have, sys.executable, want))
        sys.exit(2)
    _old()
import marshal, os, zipimport
def _boot():
    archive = os.path.dirname(os.path.abspath(__file__))
    reader = zipimport.zipimporter(archive)
    parts = {parts}
    try:
        import _frozen_importlib_external as external
        codes = marshal.loads(reader.get_data({code} % external.MAGIC_NUMBER.hex()))
    except (ImportError, AttributeError, OSError, ValueError, EOFError, TypeError):
        codes = []
        for name in parts:
            path = os.path.join(archive, "_shipyard", name + ".py")
            source = reader.get_data({source} % name)
            codes.append(compile(source, path, "exec", dont_inherit=True))
    package = type(sys)("_shipyard_boot")
    package.__path__ = []
    sys.modules[package.__name__] = package
    for name, code in zip(parts, codes):
        module = package
        if name != "boot":
            module = type(sys)(package.__name__ + "." + name)
            sys.modules[module.__name__] = module
            setattr(package, name, module)
        module.__package__ = package.__name__
        exec(code, module.__dict__)
    package.main(archive)
_boot()
"""
MAIN = MAIN.replace("{parts}", repr(PARTS)).replace("{code}", repr(CODE))
MAIN = MAIN.replace("{source}", repr(SOURCE))
