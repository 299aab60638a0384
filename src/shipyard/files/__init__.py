"""The repository's files as inputs: which files a source folder is made of, their
hash (`sources`), and digests remembered by stat facts between runs (`statcache`).

Below the engine and the workspace reader, which both hash source files."""
