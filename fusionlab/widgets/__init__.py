"""fusionlab's Jupyter widgets (thin Python side; the front end is in the top-level `widgets/` folder).

GraphView (clickable graph), ModuleGraph (a whole model folded by module: open, zoom, pan, search),
StageStepper (stages and decisions, with play), SourceCompare (our Triton beside Inductor's), TimingPlot (live
benchmark charts) and Explorer (all of them, linked: `ex.show()`). Each also renders as static HTML, so saved
notebooks read on GitHub.

    >>> from fusionlab.widgets import Explorer
    >>> Explorer(ex)
"""

from fusionlab.widgets.explorer import Explorer
from fusionlab.widgets.graph_view import GraphView
from fusionlab.widgets.module_graph import ModuleGraph
from fusionlab.widgets.source_compare import SourceCompare
from fusionlab.widgets.stage import StageView, stage_widget
from fusionlab.widgets.stepper import StageStepper
from fusionlab.widgets.timing_plot import TimingPlot

__all__ = ["Explorer", "GraphView", "ModuleGraph", "SourceCompare", "StageStepper", "StageView", "TimingPlot",
           "stage_widget"]
