"""The launcher: `python -m paddlike.launch [options] training_script [args ...]`.

Kept import-light on purpose (no argparse, socket, psutil or even `typing` at package
import): see `paddlike.launch.main` for the flow.

`NamedTuple` here is for the launcher's frozen records. Type checkers see
`typing.NamedTuple` itself; at run time the same class body becomes a
tuple subclass like `collections.namedtuple`'s (same `_fields`, `_replace`, `_asdict`,
`_make`, repr) with the body's methods, properties and docstring. Importing `typing`,
checking every field's annotation (each one compiled) and namedtuple's `eval` of each
`__new__` are what this saves, and the launcher's start-up is every job's latency
(bench/launch.py). Re-measured for issue 33 (callgrind, `--nproc_per_node 2 --dry_run`,
the venv's python): 474.8 M instructions with this class, 509.7 M with
`typing.NamedTuple` (+34.9 M, +7 %; `python -c pass` is 87.5 M); wall time, fastest of
15 alternating runs (python3 -s), 83.6 ms against 93.8 ms. A one-node launch imports no `typing`
(tests/launch/test_records.py). Annotations stay strings
(``from __future__ import annotations``):

    from paddlike.launch import NamedTuple

    class NodeEntry(NamedTuple):
        index: int
        job_id: str = ""
"""

from __future__ import annotations

import signal as _signal

# nohup's mark, read at the launcher's first import, before it installs any handler: a
# launcher started with SIGHUP ignored leaves it ignored (`run.signals.kept_ignored`), and
# its workers inherit it so; the job outlives the terminal it was started from
HANGUP_IGNORED = _signal.getsignal(_signal.SIGHUP) is _signal.SIG_IGN

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    try:
        from _collections import _tuplegetter  # what collections.namedtuple uses
    except ImportError:  # another Python implementation
        from operator import itemgetter as _itemgetter

        def _tuplegetter(index, doc):  # type: ignore[no-untyped-def]
            return property(_itemgetter(index), doc=doc)

    # names the namespace of a class body always has; not fields, not copied
    _BODY = frozenset({"__module__", "__qualname__", "__annotations__", "__orig_bases__"})
    _RESERVED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__"})

    def _record(name, module, fields, defaults):  # type: ignore[no-untyped-def]
        """A tuple subclass like `collections.namedtuple`'s, built without `eval` (whose
        parse and compile are most of what a named tuple costs to define)."""
        n = len(fields)
        index = {f: i for i, f in enumerate(fields)}
        first_default = n - len(defaults)
        new_tuple = tuple.__new__

        def __new__(cls, *args, **kwargs):  # type: ignore[no-untyped-def]
            if len(args) == n and not kwargs:
                return new_tuple(cls, args)
            if len(args) > n:
                raise TypeError(f"{name}() takes {n} arguments but {len(args)} were given")
            values = list(args)
            for i in range(len(args), n):
                field = fields[i]
                if field in kwargs:
                    values.append(kwargs.pop(field))
                elif i >= first_default:
                    values.append(defaults[i - first_default])
                else:
                    raise TypeError(f"{name}() missing required argument: {field!r}")
            if kwargs:
                key = next(iter(kwargs))
                what = "multiple values for argument" if key in index else "an unexpected keyword"
                raise TypeError(f"{name}() got {what} {key!r}")
            return new_tuple(cls, values)

        def _make(cls, iterable):  # type: ignore[no-untyped-def]
            result = new_tuple(cls, iterable)
            if len(result) != n:
                raise TypeError(f"{name}: expected {n} arguments, got {len(result)}")
            return result

        def _replace(self, **changes):  # type: ignore[no-untyped-def]
            result = self._make(changes.pop(f, v) for f, v in zip(fields, self, strict=True))
            if changes:
                raise ValueError(f"{name}: got unexpected field names: {list(changes)!r}")
            return result

        def __repr__(self):  # type: ignore[no-untyped-def]
            args = ", ".join(f"{f}={v!r}" for f, v in zip(fields, self, strict=True))
            return f"{type(self).__name__}({args})"

        def _asdict(self):  # type: ignore[no-untyped-def]
            return dict(zip(fields, self, strict=True))

        def __getnewargs__(self):  # type: ignore[no-untyped-def]
            return tuple(self)

        ns = {
            "__doc__": f"{name}({', '.join(fields)})",
            "__slots__": (),
            "_fields": fields,
            "_field_defaults": dict(zip(fields[first_default:], defaults, strict=True)),
            "__new__": __new__,
            "_make": classmethod(_make),
            "_replace": _replace,
            "__repr__": __repr__,
            "_asdict": _asdict,
            "__getnewargs__": __getnewargs__,
            "__match_args__": fields,
            "__module__": module,
        }
        for i, field in enumerate(fields):
            ns[field] = _tuplegetter(i, f"Alias for field number {i}")
        return type(name, (tuple,), ns)

    class _NamedTupleMeta(type):
        def __new__(mcs, name, bases, ns):  # type: ignore[no-untyped-def]
            if ns.get("_root", False):
                return super().__new__(mcs, name, bases, ns)
            annotations = ns.get("__annotations__", {})
            fields = tuple(annotations)
            defaults = []
            for field in fields:
                if field.startswith("_"):
                    raise ValueError(f"{name}: field names cannot start with '_', got {field!r}")
                if field in ns:
                    defaults.append(ns[field])
                elif defaults:
                    raise TypeError(
                        f"{name}: field {field!r} without a default follows a field with one; "
                        "put the fields with defaults last"
                    )
            cls = _record(name, ns["__module__"], fields, tuple(defaults))
            cls.__annotations__ = dict(annotations)
            cls.__qualname__ = ns.get("__qualname__", name)
            for key, value in ns.items():
                if key not in _BODY and key not in fields:
                    if key in _RESERVED:
                        raise AttributeError(f"{name}: cannot overwrite NamedTuple's {key}")
                    setattr(cls, key, value)
            return cls

    NamedTuple = _NamedTupleMeta("NamedTuple", (), {"_root": True})
