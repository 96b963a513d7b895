"""Every experiment `bench/run` knows, in the order of the default run.

A module of its own, above `experiments`, `floor` and `realwork`: those
build on `experiments`' classes, so the list that names them all cannot
live there without an import circle.
"""

from .experiments import (
    DbenchSync,
    FioOverwrite,
    FioRandRead,
    FioSeqWrite,
    Fragmented,
    FsMark,
    FsMarkScale,
    MetaLatency,
    Sequential,
    XattrBench,
)
from .crypt import Crypt
from .floor import Floor
from .realwork import RealWork

ALL = [
    DbenchSync(),
    FsMark(),
    XattrBench(),
    Fragmented(),
    FioOverwrite(),
    FioRandRead(),
    FioSeqWrite(),
    Sequential(),
    MetaLatency(),
    FsMarkScale(),
    Floor(),
    RealWork(),
    Crypt(),
]
BY_NAME = {e.name: e for e in ALL}
