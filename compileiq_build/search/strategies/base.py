"""The contract between the search loop and its strategies.

A strategy sees a `Context` (the space, the history of measured and pending configurations,
the candidates whose machine code is known without measuring) and returns a `Proposal` (a
configuration and the phase of the strategy that chose it, for the log) or `Stop` (why it has
nothing more to propose).  Strategies hold no state of their own: the same context gives the
same proposal, so a resumed run continues where it stopped.

Machine code is the unit of measurement: configurations that compile to the same code are one
point, measured once.  `Trial.code` and `Candidate.code` are opaque labels of it (a digest in
`tune`, a table's `code` column in replays; "" when unknown).  A closed context (a sampled
table, or the pool of compiled candidates) lets a strategy choose only among `known`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, runtime_checkable

from compileiq_build.build.space import BASELINE, Config, FlagSpace, config_key


@dataclass(frozen=True)
class Trial:
    """What a strategy knows of one configuration it proposed."""

    config: Config
    ratio: float | None  # geometric mean over workloads of candidate/baseline cost; None if invalid
    faster: bool  # significantly faster than the baseline on every workload
    spread: float | None = None  # relative half-width of its ratio's interval: what it could resolve
    code: str = ""  # label of its machine code; "" when unknown
    pending: bool = False  # proposed and not measured yet: ratio and faster mean nothing
    phase: str = ""  # the strategy's phase that proposed it (Proposal.phase); "" when unknown
    parent: str = ""  # Proposal.parent; "" when none or unknown (recorded before it was kept)


@dataclass(frozen=True)
class Candidate:
    """A configuration whose machine code (and compile-time features) are known before measuring."""

    config: Config
    code: str
    features: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Proposal:
    config: Config
    phase: str  # which part of the strategy chose it: "screen", "combine", "model", ...
    parent: str = ""  # key of the configuration it refines (the model's local step), or ""


@dataclass(frozen=True)
class Stop:
    reason: str


@dataclass(frozen=True)
class Context:
    space: FlagSpace
    history: Sequence[Trial] = ()
    known: Sequence[Candidate] = ()
    closed: bool = False  # choose among `known` only
    budget: int | None = None  # distinct machine codes the search may measure
    baseline_code: str = ""
    baseline_features: Mapping[str, float] = field(default_factory=dict)  # the project's flags' code

    @cached_property
    def measured(self) -> list[tuple[Config, Trial]]:
        """Measured trials, each with its configuration in full."""
        return [(self.space.full_config(t.config), t) for t in self.history if not t.pending]

    @cached_property
    def tried(self) -> set[str]:
        """Keys of every configuration measured or pending, and of the baseline."""
        return {config_key(self.space.full_config(t.config)) for t in self.history} | {BASELINE}

    @cached_property
    def codes(self) -> dict[str, str]:
        """Configuration key -> machine-code label, where known."""
        out = {config_key(self.space.full_config(c.config)): c.code for c in self.known if c.code}
        out.update({config_key(self.space.full_config(t.config)): t.code for t in self.history if t.code})
        if self.baseline_code:
            out[BASELINE] = self.baseline_code
        return out

    @cached_property
    def taken_codes(self) -> set[str]:
        """Codes measured or pending (and the baseline's): proposing another of them is wasted."""
        return {t.code for t in self.history if t.code} | ({self.baseline_code} - {""})

    @cached_property
    def by_code(self) -> dict[str, Trial]:
        """A measured trial per machine code, the baseline's code as ratio 1."""
        out = {t.code: t for _, t in self.measured if t.code}
        if self.baseline_code:
            out[self.baseline_code] = Trial({}, 1.0, False, code=self.baseline_code)
        return out

    @property
    def spent(self) -> int:
        """Evaluations spent: distinct codes measured or pending, the baseline's excepted
        (configurations without a known code count one each)."""
        return len({t.code or f"?{i}" for i, t in enumerate(self.history)} - {self.baseline_code})

    def fresh(self, config: Mapping[str, str]) -> bool:
        """Neither tried nor of a code already measured or pending."""
        key = config_key(self.space.full_config(config))
        return key not in self.tried and self.codes.get(key, "") not in self.taken_codes

    def outcome(self, config: Mapping[str, str]) -> Trial | None:
        """What is known of a configuration's measurement: its own, or that of its machine code."""
        key = config_key(self.space.full_config(config))
        for c, t in self.measured:
            if config_key(c) == key:
                return t
        code = self.codes.get(key, "")
        return self.by_code.get(code) if code else None

    def choices(self) -> list[Config]:
        """In a closed context: the fresh known configurations, in the order given."""
        return [self.space.full_config(c.config) for c in self.known if self.fresh(c.config)]

    def nearest(self, config: Mapping[str, str], rng: random.Random) -> Config | None:
        """The fresh known configuration with the fewest options changed from `config` (ties at
        random), for a closed context; `config` itself when the context is open."""
        if not self.closed:
            return self.space.full_config(config) if self.fresh(config) else None
        wanted = self.space.full_config(config)
        options = self.choices()
        if not options:
            return None
        distance = [sum(c[k] != v for k, v in wanted.items()) for c in options]
        low = min(distance)
        return rng.choice([c for c, d in zip(options, distance, strict=True) if d == low])


class Strategy(Protocol):
    """Proposes the next configuration to measure, or stops.  A strategy may also be Scouting
    or Vetting (below): the pipeline asks those that are."""

    name: str

    def propose(self, context: Context) -> Proposal | Stop: ...


@runtime_checkable
class Scouting(Strategy, Protocol):
    """Names configurations to compile ahead while the GPU measures (pipeline.py): their code
    and features arrive as known candidates."""

    def scout(self, context: Context, count: int) -> list[Config]: ...


@runtime_checkable
class Vetting(Strategy, Protocol):
    """Looks at a proposal once compiled, before the GPU measures it: why not to measure it
    ("": measure), `context` knowing the candidate's code and features; a proposal it turns
    down stays a known candidate."""

    def vet(self, context: Context, proposal: Proposal, candidate: Candidate) -> str: ...
