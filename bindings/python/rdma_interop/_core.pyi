# The compiled pybind11 module. Its functions are internal: the typed public surface is
# rdma_interop.wire and rdma_interop.errors, which call into it. This stub tells type
# checkers the module exists without restating every binding.
from typing import Any

def __getattr__(name: str) -> Any: ...
