"""Options written as text -> typed values, for every dataclass that takes them.

Two places take ``KEY=VALUE`` options on the command line: a pass in a pipeline
(``add-mesh{shape=2x4 axes=batch,model}``, ``shard_opt.pass_manager``) and a cost model
(``--cost-model tenstorrent:dispatch=untraced,prefetch_weights=true``,
``shard_opt.costmodel.registry``). Both are dataclasses whose fields are their options;
``option_value`` turns one text value into its field's type, the same way for both.
"""

from __future__ import annotations

import dataclasses

from shard_opt.errors import UserError


def option_value(raw: str, f: dataclasses.Field, where: str, key: str | None = None):
    """The text ``raw`` as field ``f``'s type: ``bool`` (true/false/1/0), ``int``,
    ``float``, ``none`` for a field that may be None; any other type keeps the text.
    A value that is not of the type is one ``UserError`` line naming ``where`` (``pass
    add-mesh``, ``cost model tenstorrent``) and the option as it was written (``key``,
    default the field's name)."""
    typ = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    text = raw.strip()
    if "None" in typ and text.lower() == "none":
        return None
    try:
        if typ.startswith("bool"):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return text.lower() in ("true", "1")
        if typ.startswith("int"):
            return int(text)
        if typ.startswith("float"):
            return float(text)
    except ValueError:
        raise UserError(f"{where}: option {key or f.name}={raw!r} is not a valid {typ}") from None
    return raw
