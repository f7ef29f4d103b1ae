"""trainspec.bridges: adapters between trainspec's protocols and other trainers' plugin APIs.

Each bridge is an optional extra and lives in its own subpackage (``trainspec.bridges.
lightning`` needs ``pip install 'trainspec[lightning]'``). Importing ``trainspec`` or this
package imports no trainer. A bridge only translates names, signatures and errors: it never
adds behaviour the wrapped object lacks, and says so where a member has no counterpart.
"""

from __future__ import annotations

__all__: list[str] = []
