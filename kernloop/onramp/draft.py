"""What `new` builds before it writes: a spec draft, its error, the element sizes it counts bytes with."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from kernloop.errors import KernLoopError

ELEM_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int64": 8, "int32": 4}


class OnrampError(KernLoopError):
    """A bad argument or source for `new`; the CLI prints it as one error line (exit 2)."""


@dataclass
class Draft:
    """A spec before it is written: what the function or problem file says, in spec terms."""
    name: str
    entry: str
    dtype: str
    symbols: dict               # symbol -> timed size, in order of first use
    inputs: list                # spec input entries (shapes in symbols)
    reference: str              # an expression, or "file.py:fn" relative to the spec
    reference_source: str | None = None   # that file's text (for probing; written if `write_file`)
    reference_fn: str | None = None
    write_file: str | None = None          # file name to write next to the spec (its text: reference_source)
    compare: dict = field(default_factory=dict)
    description: str = ""
    notes: list = field(default_factory=list)


def tensor_bytes(d: Draft, out_shape: list | None, sizes: dict) -> int:
    """Bytes of the inputs and the output at `sizes` (symbol -> size); an unknown output shape
    (None) is counted as large as the inputs."""
    def nbytes(shape, dt):
        return ELEM_BYTES[dt] * math.prod(sizes[x] if isinstance(x, str) else x for x in shape)
    ins = sum(nbytes(i["shape"], i.get("dtype", d.dtype)) for i in d.inputs)
    return ins + (ins if out_shape is None else nbytes(out_shape, d.dtype))
