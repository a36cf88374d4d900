"""The 4-bit NormalFloat (NF4) code book.

NF4 (Dettmers et al., "QLoRA", 2023) spends its 16 code points where normally distributed
weights are dense: each half of the code book holds quantiles of a standard normal,
rescaled so the extreme codes are exactly -1 and +1, and zero is representable exactly.
The values below are the standard table every NF4 implementation (bitsandbytes, eformer,
...) agrees on, so weights quantized here are bit-compatible with those tools.
"""

import numpy as np

# Ascending; index 7 is exactly 0.0, index 0 is -1.0, index 15 is +1.0.
NF4_CODE: np.ndarray = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)
NF4_CODE.flags.writeable = False

# Decision thresholds between neighbouring codes: a normalized value v maps to the number
# of midpoints strictly below it, i.e. to its nearest code (ties go to the lower code).
NF4_MIDPOINTS: np.ndarray = ((NF4_CODE[1:] + NF4_CODE[:-1]) / 2).astype(np.float32)
NF4_MIDPOINTS.flags.writeable = False
