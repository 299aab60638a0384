"""`shipyard graph`: the repository's projects, libraries, binaries and outputs as a
picture (a self-contained HTML page, Mermaid, DOT or JSON).

`model` builds the graph from what `plan` and `affected` already know; `text`
writes it as Mermaid or DOT; `page` as one HTML page that needs no network.
"""

from shipyard.engine.graph.model import Edge, Graph, Node, build_graph
from shipyard.engine.graph.render import FORMATS, format_for, render

__all__ = ["FORMATS", "Edge", "Graph", "Node", "build_graph", "format_for", "render"]
