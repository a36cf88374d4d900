"""ggml, llama.cpp's tensor library, as a CPU benchmark contender (through ggml-python).

Issue 23 set jaxcore's CPU goals against llama.cpp's q8_0 and q4_0 matmuls measured on
another machine. With the ``ggml-python`` package importable (``pip install ggml-python``;
it builds ggml from source, for the CPU it builds on, so add ``CMAKE_ARGS=-DGGML_LLAMAFILE=ON``
for llama.cpp's own setting: its tinyBLAS kernels for M > 1), ``quantized_matmul.py`` times
ggml's ``mul_mat`` beside jaxcore's kernels and XLA's dense matmul in the same run.

ggml stores a weight transposed to jaxcore's: N rows of K, each row in blocks of 32 along K
(q8_0: 32 int8 codes and a float16 scale, 1.0625 bytes per weight; q4_0: 32 nibbles and a
float16 scale, 0.5625). One timed call computes one ggml graph of ``chain`` products, each by
its own weight copy, on a ggml thread pool of the usable cores whose idle threads sleep
rather than poll (as ONNX Runtime's are told to), so they leave the cores to the next
contender. ggml quantizes the activations itself (to q8_0), as jaxcore's int8 precision does.
The weights are used as a ggml context holds them; llama.cpp's loader may re-lay q4_0 into
interleaved tiles (its CPU "repack" buffers), which this does not do.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np

FORMATS = ("q8_0", "q4_0")


class _Graph(NamedTuple):
    """One ggml graph of ``chain`` products and what computing it needs."""

    graph: object  # ggml_cgraph pointer
    plan: object  # its ggml_cplan
    work: object  # the plan's work buffer (kept alive with it)
    outputs: list  # the products' tensors


def load():
    """The ``ggml`` module and a one-line description of its build, or (None, why not)."""
    try:
        import ggml
    except ImportError as e:
        return None, (f"ggml skipped: {e} (CMAKE_ARGS=-DGGML_LLAMAFILE=ON pip install ggml-python)")
    sgemm = "tinyBLAS on" if ggml.ggml_cpu_has_llamafile() else "tinyBLAS off (M > 1 slower)"
    version = getattr(ggml, "__version__", "?")
    return ggml, f"ggml-python {version}, {sgemm}"


def stored_bytes(ggml, fmt: str, k: int, n: int) -> int:
    """Bytes of a (K, N) weight in ggml format ``fmt`` (codes and scales)."""
    return ggml.ggml_row_size(_kind(ggml, fmt), k) * n


def _kind(ggml, fmt: str) -> int:
    if fmt not in FORMATS:
        raise ValueError(f"unknown ggml format {fmt!r}; choose from {FORMATS}")
    return ggml.GGML_TYPE_Q8_0 if fmt == "q8_0" else ggml.GGML_TYPE_Q4_0


class Contender:
    """``copies`` copies of one weight in a ggml format, timed in graphs of ``chain``."""

    def __init__(self, ggml, fmt: str, w: np.ndarray, copies: int, chain: int, threads: int):
        """Quantizes ``w`` (K, N) with ggml's own quantizer and copies it ``copies`` times.

        Args:
            ggml: the module ``load()`` returned.
            fmt: one of ``FORMATS``.
            w: the float32 weight, (K, N) as jaxcore's arrays hold it.
            copies: distinct copies (a multiple of ``chain``), so each product reads its
                weight from memory.
            chain: products per timed graph.
            threads: ggml's thread count (the usable cores).
        """
        if copies % chain:
            raise ValueError(f"copies ({copies}) must be a multiple of chain ({chain})")
        self._g = ggml
        self.k, self.n = w.shape
        self.chain = chain
        self.threads = threads
        kind = _kind(ggml, fmt)
        self.nbytes = stored_bytes(ggml, fmt, self.k, self.n)
        overhead = ggml.ggml_tensor_overhead() * copies + (1 << 20)
        self._ctx = ggml.ggml_init(
            ggml.ggml_init_params(
                mem_size=copies * (self.nbytes + 64) + overhead, mem_buffer=None, no_alloc=False
            )
        )
        self._weights = [ggml.ggml_new_tensor_2d(self._ctx, kind, self.k, self.n)]
        rows = np.ascontiguousarray(w.T, dtype=np.float32)  # ggml's (N rows of K)
        first = ggml.ggml_get_data(self._weights[0])
        src = rows.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        ggml.ggml_quantize_chunk(kind, src, first, 0, self.n, self.k, None)
        for _ in range(copies - 1):
            t = ggml.ggml_new_tensor_2d(self._ctx, kind, self.k, self.n)
            ctypes.memmove(ggml.ggml_get_data(t), first, self.nbytes)
            self._weights.append(t)
        params = ggml.ggml_threadpool_params_default(threads)
        params.poll = 0  # idle workers sleep: a polling pool would take the next contender's cores
        self._pool = ggml.ggml_threadpool_new(ctypes.byref(params))
        # The graphs of the M last built (_build): their context, their input tensor, and
        # per set of `chain` copies a _Graph.
        self._m = None
        self._m_ctx = None
        self._x = None
        self._graphs = []

    def _build(self, m: int):
        """The graphs for M rows of activations (kept while M stays the same)."""
        if m == self._m:
            return
        g = self._g
        self._free_graphs()
        per_graph = self.chain * (self.n * m * 4 + 64 + g.ggml_tensor_overhead())
        ctx = g.ggml_init(
            g.ggml_init_params(
                mem_size=self.k * m * 4
                + per_graph * len(self._weights) // self.chain
                + g.ggml_graph_overhead() * len(self._weights)
                + (1 << 20),
                mem_buffer=None,
                no_alloc=False,
            )
        )
        x = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, self.k, m)
        graphs = []
        for s in range(0, len(self._weights), self.chain):
            outs = [g.ggml_mul_mat(ctx, a, x) for a in self._weights[s : s + self.chain]]
            graph = g.ggml_new_graph(ctx)
            for o in outs:
                g.ggml_build_forward_expand(graph, o)
            plan = g.ggml_graph_plan(graph, self.threads, self._pool)
            work = (ctypes.c_uint8 * max(1, plan.work_size))()
            plan.work_data = ctypes.cast(work, ctypes.POINTER(ctypes.c_uint8))
            graphs.append(_Graph(graph, plan, work, outs))
        self._m, self._m_ctx, self._x, self._graphs = m, ctx, x, graphs

    def _free_graphs(self) -> None:
        if self._m_ctx is not None:
            self._g.ggml_free(self._m_ctx)
        self._m, self._m_ctx, self._x, self._graphs = None, None, None, []

    def _run(self, x: np.ndarray, graph: _Graph) -> None:
        g = self._g
        ctypes.memmove(g.ggml_get_data(self._x), x.ctypes.data, x.nbytes)
        status = g.ggml_graph_compute(graph.graph, ctypes.byref(graph.plan))
        if status != 0:
            raise RuntimeError(f"ggml_graph_compute failed with status {status}")

    def output(self, graph: _Graph, i: int) -> np.ndarray:
        """Product ``i`` of ``graph``'s last run, (M, N)."""
        t = graph.outputs[i]
        m = self._g.ggml_nrows(t)
        data = ctypes.cast(self._g.ggml_get_data(t), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(data, (m, self.n)).copy()

    def contender(self, x: np.ndarray):
        """(fn, [args per set]) for ``quantized_matmul._time_rotating``, at x's M."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.shape[1] != self.k:
            raise ValueError(f"x has {x.shape[1]} columns, the weight {self.k} rows")
        self._build(x.shape[0])
        return self._run, [(x, graph) for graph in self._graphs]

    def check(self, x: np.ndarray, w: np.ndarray, tolerance: float) -> float:
        """Builds x's graphs, runs the first and returns its first product's error against
        x @ w (relative to the product's norm); raises where it passes ``tolerance``."""
        fn, sets = self.contender(x)
        fn(*sets[0])
        want = x.astype(np.float64) @ w.astype(np.float64)
        got = self.output(sets[0][1], 0)
        err = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
        if not err <= tolerance:
            raise RuntimeError(f"ggml's product is off by {err:.3g} (tolerance {tolerance})")
        return err

    def close(self) -> None:
        """Frees the contexts and the thread pool."""
        g = self._g
        self._free_graphs()
        if self._pool is not None:
            g.ggml_threadpool_free(self._pool)
            self._pool = None
        if self._ctx is not None:
            g.ggml_free(self._ctx)
            self._ctx = None
