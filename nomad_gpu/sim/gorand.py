"""Go's `math/rand` stream, reproduced in Python, so the paper's workloads can be rebuilt exactly.

The FGD paper's simulator seeds Go's global generator (`rand.Seed(seed)`) and derives from it the
shuffled workload, the resampled copies and the per-seed node priority. Rebuilding those exact
workloads is what lets a run here be compared point by point with the published per-seed curves,
so this module implements the same generator: an additive lagged Fibonacci generator
(`x[n] = x[n-607] + x[n-273] mod 2**64`, Mitchell and Reeds) whose 607-word start state is a
fixed "cooked" vector XOR-ed with a Lehmer-seeded fill.

Go ships the cooked vector as a table: the state reached from `srand(1)` after 7.8e12 steps.
Rather than carry the table, it is recomputed here (once, lazily) by jumping the linear recurrence
ahead with polynomial exponentiation modulo its characteristic polynomial `x**607 - x**334 - 1`
over Z/2**64 (about a second). The tests pin the result to values Go is known to produce.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

_LEN = 607
_TAP = 273
_MASK64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1
_M31 = (1 << 31) - 1
_COOK_STEPS = 7_800_000_000_000
_SLOT_BITS = 140
"""Bits per coefficient when packing a polynomial into one integer: 64 + 64 + log2(607) fits."""


def _seedrand(x: int) -> int:
    """One Lehmer step x -> 48271 x mod (2**31 - 1), as Go's int32 Schrage form computes it."""
    hi, lo = divmod(x, 44488)
    x = 48271 * lo - 3399 * hi
    return x + _M31 if x < 0 else x


def _lehmer_fill(seed: int, shifts: tuple[int, int]) -> list[int]:
    seed %= _M31
    if seed == 0:
        seed = 89482311
    x = seed
    out = [0] * _LEN
    for i in range(-20, _LEN):
        x = _seedrand(x)
        if i >= 0:
            u = x << shifts[0]
            x = _seedrand(x)
            u ^= x << shifts[1]
            x = _seedrand(x)
            u ^= x
            out[i] = u
    return out


def _pack(coeffs: list[int]) -> int:
    out = 0
    for c in reversed(coeffs):
        out = (out << _SLOT_BITS) | c
    return out


def _unpack(value: int, count: int) -> list[int]:
    mask = (1 << _SLOT_BITS) - 1
    out = []
    for _ in range(count):
        out.append(value & mask & _MASK64)
        value >>= _SLOT_BITS
    return out


def _mulmod(a: list[int], b: list[int]) -> list[int]:
    """a * b modulo x**607 - x**334 - 1, coefficients modulo 2**64 (Kronecker substitution)."""
    prod = _unpack(_pack(a) * _pack(b), 2 * _LEN - 1)
    for k in range(2 * _LEN - 2, _LEN - 1, -1):
        c = prod[k]
        if c:
            prod[k - _LEN] = (prod[k - _LEN] + c) & _MASK64
            prod[k - _TAP] = (prod[k - _TAP] + c) & _MASK64
    return prod[:_LEN]


def _x_power(n: int) -> list[int]:
    result = [1] + [0] * (_LEN - 1)
    base = [0, 1] + [0] * (_LEN - 2)
    while n:
        if n & 1:
            result = _mulmod(result, base)
        n >>= 1
        if n:
            base = _mulmod(base, base)
    return result


@lru_cache(maxsize=1)
def cooked() -> tuple[int, ...]:
    """The 607-word cooked vector: Go's generator state after 7.8e12 steps from `srand(1)`.

    Step k (1-based) writes s[k] = s[k-607] + s[k-273] into slot (334 - k) mod 607, so slot p
    starts as s[j] for the j in -606..0 with (334 - j) = p (mod 607) and ends as the s[j] for
    the j in N-606..N with the same residue. s[m + n] is the combination of s[m..m+606] given by
    the coefficients of x**n modulo the characteristic polynomial.
    """
    vec0 = _lehmer_fill(1, (20, 10))
    base = [vec0[(334 - j) % _LEN] for j in range(-606, 1)]  # s[-606..0]
    coeffs = _x_power(_COOK_STEPS)  # s[-606 + N] from s[-606..0]
    out = [0] * _LEN
    for target in range(_COOK_STEPS - 606, _COOK_STEPS + 1):
        value = sum(c * s for c, s in zip(coeffs, base, strict=True)) & _MASK64
        out[(334 - target) % _LEN] = value
        # next: multiply by x
        top = coeffs[-1]
        coeffs = [0, *coeffs[:-1]]
        if top:
            coeffs[0] = (coeffs[0] + top) & _MASK64
            coeffs[_LEN - _TAP] = (coeffs[_LEN - _TAP] + top) & _MASK64
    return tuple(out)


class GoRand:
    """Go's `rand.New(rand.NewSource(seed))` (and the global source after `rand.Seed(seed)`)."""

    def __init__(self, seed: int) -> None:
        fill = _lehmer_fill(seed, (40, 20))
        self._vec = [(f ^ c) & _MASK64 for f, c in zip(fill, cooked(), strict=True)]
        self._tap = 0
        self._feed = _LEN - _TAP

    def uint64(self) -> int:
        self._tap = self._tap - 1 if self._tap else _LEN - 1
        self._feed = self._feed - 1 if self._feed else _LEN - 1
        x = (self._vec[self._feed] + self._vec[self._tap]) & _MASK64
        self._vec[self._feed] = x
        return x

    def int63(self) -> int:
        """Also what Go's `Int()` returns on 64-bit platforms."""
        return self.uint64() & _MASK63

    def int31(self) -> int:
        return self.int63() >> 32

    def uint32(self) -> int:
        return (self.int63() >> 31) & 0xFFFFFFFF

    def int63n(self, n: int) -> int:
        if n <= 0:
            raise ValueError("int63n: n must be > 0")
        if n & (n - 1) == 0:
            return self.int63() & (n - 1)
        top = _MASK63 - (1 << 63) % n
        v = self.int63()
        while v > top:
            v = self.int63()
        return v % n

    def int31n(self, n: int) -> int:
        if n <= 0:
            raise ValueError("int31n: n must be > 0")
        if n & (n - 1) == 0:
            return self.int31() & (n - 1)
        top = _M31 - (1 << 31) % n
        v = self.int31()
        while v > top:
            v = self.int31()
        return v % n

    def intn(self, n: int) -> int:
        return self.int31n(n) if n <= _M31 else self.int63n(n)

    def _int31n_lemire(self, n: int) -> int:
        """Go's unexported `int31n` (used by Shuffle): Lemire's multiply-shift with rejection."""
        prod = self.uint32() * n
        low = prod & 0xFFFFFFFF
        if low < n:
            thresh = ((1 << 32) - n) % n
            while low < thresh:
                prod = self.uint32() * n
                low = prod & 0xFFFFFFFF
        return prod >> 32

    def perm(self, n: int) -> list[int]:
        m = [0] * n
        for i in range(n):
            j = self.intn(i + 1)
            m[i] = m[j]
            m[j] = i
        return m

    def shuffle(self, n: int, swap: Callable[[int, int], None]) -> None:
        i = n - 1
        while i > _M31 - 1:
            swap(i, self.int63n(i + 1))
            i -= 1
        while i > 0:
            swap(i, self._int31n_lemire(i + 1))
            i -= 1

    def float64(self) -> float:
        while True:
            f = self.int63() / (1 << 63)
            if f != 1.0:
                return f
