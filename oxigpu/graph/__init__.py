"""The op graph: IR (``ir``) built by ``oxigpu.models``, compiled by ``plan.compile`` into a Plan that
every backend runs."""
from .ir import STEP_PARAMS, Graph, Node, Value
from .plan import ALIGN, Plan, compile

__all__ = ["STEP_PARAMS", "Graph", "Node", "Value", "ALIGN", "Plan", "compile"]
