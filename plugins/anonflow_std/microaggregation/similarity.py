"""The similarity the MDAV-family loops are written against (:class:`Similarity`: an
:class:`Index` answering farthest/nearest queries over the records not yet grouped, an
:class:`Extender` for V-MDAV's extension test), with the tuning constants of the leaf
indexes that implement it (:mod:`.leaf_index` for the Euclidean distance,
:mod:`.grey_similarity` for grey relational analysis). See :mod:`.kernels` for the loops.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray


FloatArray = NDArray[np.float64]


IntArray = NDArray[np.int64]


#: Maximum number of records per kd leaf.
LEAF_SIZE = 64


#: Slabs per split when building the kd leaves.
KD_FANOUT = 4


#: Relative slack for pruning bounds (rounding errors are below ``1e-13``).
MARGIN = 1e-9


#: Absolute slack guarding the relative one against underflow.
TINY = 1e-280


#: Leaves evaluated up front by a nearest-neighbour query.
NEAR_LEAVES = 6


#: Pre-filter nearest-neighbour candidates beyond this many slots.
FILTER_ABOVE = 2048


#: Leaves evaluated up front by a farthest-point query.
FAR_LEAVES = 3


#: Rebuild the radial list when a centroid query scans more records.
REBUILD_SCAN = 2048


#: Records sorted exactly when the radial list is rebuilt.
RADIAL_SORTED = 8192


#: Centroid queries between two refreshes of the leaf boxes.
SHRINK_EVERY = 8


class Best(NamedTuple):
    """The most similar remaining record to some reference, and its similarity value."""

    id: int
    #: squared distance (Euclidean) or balanced adjacent degree (grey)
    value: float
    #: whatever the similarity needs to keep the answer valid while records leave
    state: object = None


class Extender(ABC):
    """Tracks, for a group being extended, the unassigned record nearest to any member."""

    @abstractmethod
    def candidate(self) -> Best:
        """The unassigned record nearest to any member (ties: lowest row) and that similarity."""

    @abstractmethod
    def add(self, record: int, other: Best) -> None:
        """``record`` (just taken) joins the group; ``other`` is its :meth:`Index.best_other`."""


class Index(ABC):
    """The queries the MDAV-family loops make, over the records not yet grouped.

    An index owns the set of *remaining* records: :meth:`take` removes records from it and
    every query answers for the records remaining at that moment.  Ties go to the lowest
    row index.
    """

    #: number of remaining records
    live: int

    @abstractmethod
    def farthest_from_centroid(self) -> int:
        """The remaining record least similar to the centroid of the remaining records."""

    @abstractmethod
    def take_group_and_farthest(self, i: int, k: int) -> tuple[IntArray, int]:
        """Take ``i`` and its ``k - 1`` nearest remaining records as a group; also return
        the remaining record farthest from ``i`` outside that group (chosen with the
        similarities of ``i`` as they were before the group was taken)."""

    @abstractmethod
    def take_nearest(self, i: int, k: int) -> IntArray:
        """Take ``i`` and its ``k - 1`` nearest remaining records as a group."""

    @abstractmethod
    def take(self, ids: IntArray) -> None:
        """Remove ``ids`` from the remaining records."""

    @abstractmethod
    def best_other(self, i: int) -> Best | None:
        """The remaining record other than ``i`` nearest to the remaining record ``i``
        (None when ``i`` is the only one)."""

    @abstractmethod
    def extender(self, members: IntArray) -> Extender:
        """An :class:`Extender` for the group ``members`` (already taken)."""

    @abstractmethod
    def extends(self, inside: float, outside: float, gamma: float) -> bool:
        """V-MDAV's extension test for the candidate's similarity to the group (``inside``)
        and to its nearest other unassigned record (``outside``)."""

    def never_extends(self, gamma: float) -> bool:
        """True when the extension test cannot hold for any data (a shortcut)."""
        return gamma <= 0

    @abstractmethod
    def nearest_group(self, rows: IntArray, centroids: FloatArray) -> IntArray:
        """For each record of ``rows``, the index of the nearest of ``centroids``
        (``(g, d)``, z-scored); ties: the lowest index."""


class Similarity(ABC):
    """How records are compared: builds an :class:`Index` over the rows of ``X``."""

    #: short name, used in messages
    name: str = ""

    @abstractmethod
    def index(self, x: FloatArray) -> Index:
        """An index over all rows of the ``(n, d)`` array ``x`` (all remaining)."""

    def prepare(self, x: FloatArray) -> FloatArray:
        """The coordinates the index works on (default: ``x`` itself)."""
        return x
