"""torchstrata.core: the IR, prims, text form, verifier, interpreter, hooks and plugins.

Every stage depends on this package and on nothing else of torchstrata.
"""

from torchstrata.core.builder import GraphBuilder, MetaInferenceError, infer_meta
from torchstrata.core.call_defaults import bind_call, current_defaults
from torchstrata.core.complex_values import COMPLEX_REASON, touches_complex
from torchstrata.core.contracts import (
    NO_CONTRACT,
    DirectLauncher,
    GraphContract,
    SegmentCompiler,
    WriteBack,
)
from torchstrata.core.direct_meta import direct_meta
from torchstrata.core.dtypes import dtype_from_short_name, dtype_short_name, wrapped_integer
from torchstrata.core.dynamo_import import dynamo_import_deferred
from torchstrata.core.fx import FxImportError, from_fx, to_fx
from torchstrata.core.graph import (
    RECOMPUTE,
    Graph,
    Node,
    NodeMeta,
    format_graph,
    iter_nodes,
    map_nodes,
    recompute_region,
    recompute_regions,
)
from torchstrata.core.guard_conditions import constant_condition, guard_condition
from torchstrata.core.guard_sources import FetchedValues
from torchstrata.core.guard_state import (
    GLOBAL_STATE_SOURCE,
    GUARD_NAMESPACE,
    STATE_FIELDS,
    describe_state,
    enabled_autocast,
    global_state,
    global_state_guard,
    state_changes,
    unsupported_state,
)
from torchstrata.core.guard_text import describe_guard
from torchstrata.core.hookspecs import PASS_STAGES, hookimpl, hookspec
from torchstrata.core.interpret import InterpreterError, interpret, random_inputs
from torchstrata.core.logs import (
    ARTIFACTS,
    LogSettings,
    LogsSyntaxError,
    artifact_logger,
    log_settings,
    set_logs,
)
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
    PassObserver,
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
from torchstrata.core.prim_enum import Prim, prims_of
from torchstrata.core.prim_errors import PrimError
from torchstrata.core.prims import (
    PRIMS_VERSION,
    PrimDef,
    PrimFamily,
    all_prims,
    get_prim,
)
from torchstrata.core.progress_report import Progress, progress
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
    guard_cells,
)
from torchstrata.core.spans import (
    Span,
    byte_span,
    element_span,
    spans_overlap,
    tensor_byte_span,
    tensor_element_span,
)
from torchstrata.core.stage_options import AutogradOptions, InductorOptions
from torchstrata.core.symbolic import (
    SYMBOLIC_TYPES,
    SymbolBinding,
    SymbolicSizes,
    active_symbolic_sizes,
    concretize,
    has_symbols,
    is_symbolic,
    size_hint,
    size_or_int,
    specialise_sizes,
    symbolic_scope,
)
from torchstrata.core.symbolic_aot import SizeOutsideTrace, SymbolicAot
from torchstrata.core.symbolic_graphs import (
    concretize_graph,
    graph_has_symbols,
    graph_symbols,
    input_symbol_slots,
)
from torchstrata.core.symbolic_guards import SizeCheck, size_guards
from torchstrata.core.symbolic_inputs import input_meta
from torchstrata.core.symbolic_rebind import rebind_graph, symbol_hints
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
    "ARTIFACTS",
    "CODEGENS",
    "COMPLEX_REASON",
    "ENTRY_POINT_GROUP",
    "GETITEM",
    "GLOBAL_STATE_SOURCE",
    "GUARD_NAMESPACE",
    "NO_CONTRACT",
    "PASS_STAGES",
    "PRIMS_VERSION",
    "RECOMPUTE",
    "STATE_FIELDS",
    "SYMBOLIC_TYPES",
    "TENSOR_TYPES",
    "AotResult",
    "AutogradOptions",
    "CaptureResult",
    "CompileOptions",
    "CompiledGraph",
    "DirectLauncher",
    "DirectProgram",
    "DuplicatePluginError",
    "FetchedValues",
    "FxImportError",
    "Graph",
    "GraphBreak",
    "GraphBuilder",
    "GraphContract",
    "GraphPass",
    "Guard",
    "GuardKind",
    "InductorOptions",
    "InterpreterError",
    "KernelInfo",
    "Level",
    "LogSettings",
    "LogsSyntaxError",
    "MetaInferenceError",
    "Minified",
    "Node",
    "NodeMeta",
    "OpKind",
    "OpRef",
    "ParseError",
    "PassManager",
    "PassObserver",
    "PassOrderError",
    "PassRecord",
    "PassValidationError",
    "Prim",
    "PrimDef",
    "PrimError",
    "PrimFamily",
    "Program",
    "Progress",
    "SegmentCompiler",
    "SizeCheck",
    "SizeOutsideTrace",
    "Span",
    "StageCheck",
    "SymbolBinding",
    "SymbolicAot",
    "SymbolicSizes",
    "TensorMeta",
    "Transformer",
    "VerificationError",
    "WriteBack",
    "active_symbolic_sizes",
    "all_prims",
    "artifact_logger",
    "assert_close_to_eager",
    "aten",
    "aten_from_overload",
    "bind_call",
    "broadcast_strides",
    "byte_span",
    "concretize",
    "concretize_graph",
    "constant_condition",
    "contiguous_strides",
    "create_plugin_manager",
    "current_defaults",
    "current_options",
    "describe_guard",
    "describe_state",
    "direct_meta",
    "dtype_from_short_name",
    "dtype_short_name",
    "dynamo_import_deferred",
    "element_span",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "enabled_autocast",
    "exact_key",
    "first_failure",
    "format_graph",
    "from_fx",
    "get_prim",
    "global_state",
    "global_state_guard",
    "graph_has_symbols",
    "graph_symbols",
    "guard_cells",
    "guard_condition",
    "has_symbols",
    "hookimpl",
    "hookspec",
    "infer_meta",
    "input_meta",
    "input_symbol_slots",
    "interpret",
    "is_dense",
    "is_symbolic",
    "iter_nodes",
    "log_settings",
    "map_nodes",
    "minify",
    "minify_graph",
    "override_options",
    "parse",
    "parse_op",
    "prim",
    "prims_of",
    "progress",
    "random_inputs",
    "rebind_graph",
    "recompute_region",
    "recompute_regions",
    "register",
    "same_layout",
    "set_logs",
    "size_guards",
    "size_hint",
    "size_or_int",
    "spans_overlap",
    "specialise_sizes",
    "stage_walk",
    "state_changes",
    "symbol_hints",
    "symbolic_scope",
    "tensor_byte_span",
    "tensor_element_span",
    "to_fx",
    "torch_op",
    "touches_complex",
    "unsupported_state",
    "verify",
    "walk_function",
    "with_input_metas",
    "wrapped_integer",
]
