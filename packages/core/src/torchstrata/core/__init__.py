"""torchstrata.core: the IR, prims, text form, verifier, interpreter, hooks and plugins.

Every stage depends on this package and on nothing else of torchstrata.
"""

from torchstrata.core.builder import GraphBuilder, MetaInferenceError, infer_meta
from torchstrata.core.call_defaults import bind_call, current_defaults
from torchstrata.core.direct_meta import direct_meta
from torchstrata.core.dtypes import dtype_from_short_name, dtype_short_name, wrapped_integer
from torchstrata.core.dynamo_import import dynamo_import_deferred
from torchstrata.core.fx import FxImportError, from_fx, to_fx
from torchstrata.core.graph import Graph, Node, NodeMeta, format_graph, iter_nodes, map_nodes
from torchstrata.core.guard_conditions import constant_condition, guard_condition
from torchstrata.core.guard_sources import FetchedValues
from torchstrata.core.hookspecs import PASS_STAGES, hookimpl, hookspec
from torchstrata.core.interpret import InterpreterError, interpret, random_inputs
from torchstrata.core.meta import (
    TensorMeta,
    broadcast_strides,
    contiguous_strides,
    is_dense,
    same_layout,
)
from torchstrata.core.minify import (
    Minified,
    StageCheck,
    first_failure,
    minify,
    minify_graph,
    stage_walk,
    walk_function,
)
from torchstrata.core.ops import (
    GETITEM,
    Level,
    OpKind,
    OpRef,
    aten,
    aten_from_overload,
    parse_op,
    prim,
    torch_op,
)
from torchstrata.core.options import CODEGENS, CompileOptions, current_options, override_options
from torchstrata.core.passes import (
    GraphPass,
    PassManager,
    PassOrderError,
    PassRecord,
    PassValidationError,
)
from torchstrata.core.plugins import (
    ENTRY_POINT_GROUP,
    DuplicatePluginError,
    create_plugin_manager,
    register,
)
from torchstrata.core.prims import (
    PRIMS_VERSION,
    PrimDef,
    PrimError,
    PrimFamily,
    all_prims,
    get_prim,
)
from torchstrata.core.results import (
    TENSOR_TYPES,
    AotResult,
    CaptureResult,
    CompiledGraph,
    DirectProgram,
    GraphBreak,
    Guard,
    GuardKind,
    KernelInfo,
    Program,
)
from torchstrata.core.spans import (
    Span,
    byte_span,
    element_span,
    spans_overlap,
    tensor_byte_span,
    tensor_element_span,
)
from torchstrata.core.testing import assert_close_to_eager
from torchstrata.core.text import ParseError, parse
from torchstrata.core.transform import (
    Transformer,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    exact_key,
    with_input_metas,
)
from torchstrata.core.verify import VerificationError, verify

__all__ = [
    "CODEGENS",
    "ENTRY_POINT_GROUP",
    "GETITEM",
    "PASS_STAGES",
    "PRIMS_VERSION",
    "TENSOR_TYPES",
    "AotResult",
    "CaptureResult",
    "CompileOptions",
    "CompiledGraph",
    "DirectProgram",
    "DuplicatePluginError",
    "FetchedValues",
    "FxImportError",
    "Graph",
    "GraphBreak",
    "GraphBuilder",
    "GraphPass",
    "Guard",
    "GuardKind",
    "InterpreterError",
    "KernelInfo",
    "Level",
    "MetaInferenceError",
    "Minified",
    "Node",
    "NodeMeta",
    "OpKind",
    "OpRef",
    "ParseError",
    "PassManager",
    "PassOrderError",
    "PassRecord",
    "PassValidationError",
    "PrimDef",
    "PrimError",
    "PrimFamily",
    "Program",
    "Span",
    "StageCheck",
    "TensorMeta",
    "Transformer",
    "VerificationError",
    "all_prims",
    "assert_close_to_eager",
    "aten",
    "aten_from_overload",
    "bind_call",
    "broadcast_strides",
    "byte_span",
    "constant_condition",
    "contiguous_strides",
    "create_plugin_manager",
    "current_defaults",
    "current_options",
    "direct_meta",
    "dtype_from_short_name",
    "dtype_short_name",
    "dynamo_import_deferred",
    "element_span",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "exact_key",
    "first_failure",
    "format_graph",
    "from_fx",
    "get_prim",
    "guard_condition",
    "hookimpl",
    "hookspec",
    "infer_meta",
    "interpret",
    "is_dense",
    "iter_nodes",
    "map_nodes",
    "minify",
    "minify_graph",
    "override_options",
    "parse",
    "parse_op",
    "prim",
    "random_inputs",
    "register",
    "same_layout",
    "spans_overlap",
    "stage_walk",
    "tensor_byte_span",
    "tensor_element_span",
    "to_fx",
    "torch_op",
    "verify",
    "walk_function",
    "with_input_metas",
    "wrapped_integer",
]
