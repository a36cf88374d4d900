"""jaxcore.implicit: array types that are not arrays, flowing through ordinary JAX code.

Quantized weights, low-rank factors or symbolic zeros subclass :class:`ImplicitArray`;
handlers registered with :func:`register` say how primitives act on them; functions
wrapped with :func:`implicit` (alias :func:`use_implicit`) dispatch to those handlers
under ``jit``, ``grad``, ``vmap`` and control flow, materializing only as a fallback.
:func:`ste` passes gradients straight through a function, quantization included.

The modules import each other in one direction; read them bottom-up:

- ``_warnings``: the fallback-materialization warning;
- ``_fields``: field declarations (children or static aux data) and the type registry;
- ``_aval``: shape/dtype, given, computed or discovered by tracing ``materialize``;
- ``_base``: the array type (construction, pytree, value equality);
- ``_dispatch``: the handler registry and its resolution by operand types;
- ``_trace``: the interpreter that routes primitives to handlers;
- ``_materialize`` (materializing through the interpreter), ``_plan`` (cached
  traces), ``_rules`` (handlers for jit, cond, while, scan, checkpoint), ``_ste``
  (straight-through estimation) and ``_tree`` (tree utilities);
- this file, which assembles the package: it installs the interpreter-aware
  materializer in ``_aval`` (used by the default fallback handler and by shape
  discovery) and registers the control-flow rules.
"""

from jaxcore.implicit import _aval, _materialize, _rules
from jaxcore.implicit._aval import CallableAval, UninitializedAval
from jaxcore.implicit._base import ImplicitArray, ImplicitArrayMeta
from jaxcore.implicit._dispatch import AmbiguousHandlerError, register, registered_handlers
from jaxcore.implicit._fields import aux_field, field
from jaxcore.implicit._materialize import default_handler, materialize_handler, materialize_nested
from jaxcore.implicit._ste import StraightThrough, ste
from jaxcore.implicit._trace import implicit, use_implicit
from jaxcore.implicit._tree import (
    combine_leaf_predicate,
    flatten_one_implicit_layer,
    implicit_depth,
    is_array,
    leaf_predicate,
    tree_flatten_with_implicit,
    tree_flatten_with_path_with_implicit,
    tree_leaves_with_implicit,
    tree_map_with_implicit,
    tree_map_with_path_with_implicit,
    tree_structure_with_implicit,
)
from jaxcore.implicit._warnings import ENV_VAR as WARN_ENV_VAR
from jaxcore.implicit._warnings import (
    MaterializationWarning,
    materialization_warnings,
    reset_materialization_warnings,
)

# Assembly: the layers below import nothing above them; they are wired together here.
_aval.install_materializer(_materialize.materialize_full)
_rules.install()

__all__ = [
    "AmbiguousHandlerError",
    "CallableAval",
    "ImplicitArray",
    "ImplicitArrayMeta",
    "MaterializationWarning",
    "StraightThrough",
    "UninitializedAval",
    "WARN_ENV_VAR",
    "aux_field",
    "default_handler",
    "field",
    "flatten_one_implicit_layer",
    "implicit",
    "combine_leaf_predicate",
    "implicit_depth",
    "is_array",
    "leaf_predicate",
    "materialization_warnings",
    "materialize_handler",
    "materialize_nested",
    "register",
    "registered_handlers",
    "reset_materialization_warnings",
    "ste",
    "tree_flatten_with_implicit",
    "tree_flatten_with_path_with_implicit",
    "tree_leaves_with_implicit",
    "tree_map_with_implicit",
    "tree_map_with_path_with_implicit",
    "tree_structure_with_implicit",
    "use_implicit",
]
