"""What GitHub answered gap repair 404 for: workflow runs and pull requests deleted on GitHub.

A deleted run's jobs stay in the lake unfinished for the two days gap repair reads, and a deleted
pull request stays open in `pr_jobs` for good: nothing in the lake changes to say they are gone.
Asked again, GitHub would answer 404 again, every pass (runs) or every hour (pull requests). So the
pass that hears 404 notes it in the archive (`gap-repair/gone.json`), and later passes do not ask.
But GitHub also answers 404 for a run it has just created (its replicas lag) and on passing errors
behind its load balancers, and a run taken for deleted would lose its jobs for good: a run's first
404 is noted as suspected (`suspected`), and the run is deleted (`runs`) only when GitHub answers
404 again when asked later (`gaps.CONFIRM_GONE_AFTER`); an answer clears the suspicion. A pull
request likewise (`pulls_suspected`, asked again on the next hour's comparison, or the first after it
that gets to it within its lookups). A file written before suspicions were noted holds deletions
only, and reads so.
A run is forgotten once it is older than what gap repair reads; a pull request once the lake no
longer shows it open. Passes may overlap (a busy pass takes longer than the schedule's interval),
so a pass merges its notes into the file as it is when it writes, not as it was when it read it;
only two writes within the same instant can still lose one's notes, which costs a request again.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from resources.storage import Store

PATH = "gap-repair/gone.json"


@dataclass
class Gone:
    runs: dict[str, str] = field(default_factory=dict)  # "owner/repo#run_id/attempt" -> when GitHub answered 404
    suspected: dict[str, str] = field(default_factory=dict)  # runs GitHub answered 404 for once -> when
    pulls: dict[str, list[int]] = field(default_factory=dict)  # "owner/repo" -> pull request numbers
    pulls_suspected: dict[str, list[int]] = field(default_factory=dict)  # answered 404 for once, not heard of since
    changed: bool = False
    set_repos: set[str] = field(default_factory=set)  # the repositories whose pulls this pass decided
    oldest: dt.datetime | None = None  # runs noted before this are forgotten
    pull_suspicions: dict[str, tuple[set[int], list[int]]] = field(default_factory=dict)  # this pass's, by repo
    suspicions: dict[str, str | None] = field(default_factory=dict)  # this pass's: noted, or cleared (None)

    @staticmethod
    def run_key(key: tuple[str, int, int]) -> str:
        repo, run_id, attempt = key
        return f"{repo}#{run_id}/{attempt}"

    def has_run(self, key: tuple[str, int, int]) -> bool:
        return self.run_key(key) in self.runs

    def suspected_since(self, key: tuple[str, int, int]) -> dt.datetime | None:
        """When GitHub first answered 404 for the run, if it has not been confirmed or cleared."""
        at = self.suspected.get(self.run_key(key))
        return None if at is None else dt.datetime.fromisoformat(at)

    def add_run(self, key: tuple[str, int, int], now: dt.datetime) -> None:
        """GitHub answered 404 again: the run is deleted."""
        self.runs[self.run_key(key)] = now.isoformat()
        self.clear_run(key)

    def suspect_run(self, key: tuple[str, int, int], now: dt.datetime) -> None:
        self._suspect(self.run_key(key), now.isoformat())

    def clear_run(self, key: tuple[str, int, int]) -> None:
        """No longer a suspicion: GitHub answered for the run, or confirmed it deleted."""
        self._suspect(self.run_key(key), None)

    def _suspect(self, run: str, at: str | None) -> None:
        self.suspicions[run] = at
        self.suspected = _applied(self.suspected, {run: at})
        self.changed = True

    def set_pulls(self, repo: str, numbers: list[int], suspected: list[int] = (),
                  unheard: set[int] = frozenset()) -> None:
        """The pull requests of `repo` GitHub no longer has that the lake still shows open, and those
        it answered 404 for the first time (asked again on the next pass that looks). An earlier first
        404 stays noted while the pull request is `unheard` (shown open here, and GitHub neither listed
        nor answered for it this pass: past the pass's lookups), so its next 404 still makes it deleted."""
        self.set_repos.add(repo)
        self.pull_suspicions[repo] = (set(unheard), list(suspected))
        first_404s = self._suspicions(repo, self.pulls_suspected)
        for notes, values in ((self.pulls, numbers), (self.pulls_suspected, first_404s)):
            if sorted(values) != notes.get(repo, []):
                notes[repo] = sorted(values)
                self.changed = True

    def _suspicions(self, repo: str, noted: dict[str, list[int]]) -> list[int]:
        """The first 404s of `repo` in `noted` as this pass changed them."""
        unheard, suspected = self.pull_suspicions[repo]
        return sorted({n for n in noted.get(repo, []) if n in unheard} | set(suspected))

    def forget_runs_before(self, oldest: dt.datetime) -> None:
        self.oldest = oldest
        kept, suspected = self._recent(self.runs), self._recent(self.suspected)
        self.changed |= len(kept) != len(self.runs) or len(suspected) != len(self.suspected)
        self.runs, self.suspected = kept, suspected

    def _recent(self, runs: dict[str, str]) -> dict[str, str]:
        if self.oldest is None:
            return runs
        return {k: at for k, at in runs.items() if dt.datetime.fromisoformat(at) >= self.oldest}

    def merged_into(self, on_file: "Gone") -> "Gone":
        """These notes over what another pass wrote since they were read: every run either noted
        (less those too old), the suspicions on file as this pass changed them (less the runs
        either pass confirmed deleted), the deleted pull requests of the repositories this pass looked
        at, and their first 404s on file as this pass changed them."""
        runs = self._recent({**on_file.runs, **self.runs})
        suspected = _applied(on_file.suspected, self.suspicions)
        return Gone(runs=runs, pulls=self._pulls(self.pulls, on_file.pulls),
                    pulls_suspected={**on_file.pulls_suspected, **{
                        repo: self._suspicions(repo, on_file.pulls_suspected) for repo in self.pull_suspicions}},
                    suspected=self._recent({run: at for run, at in suspected.items() if run not in runs}))

    def _pulls(self, mine: dict[str, list[int]], on_file: dict[str, list[int]]) -> dict[str, list[int]]:
        """`on_file`, with the repositories this pass looked at as this pass left them."""
        return {**on_file, **{repo: mine[repo] for repo in self.set_repos if repo in mine}}


def _applied(suspected: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    """`suspected` with `changes` made: a run noted keeps its first 404's time, one cleared (None) goes."""
    out = dict(suspected)
    for run, at in changes.items():
        if at is None:
            out.pop(run, None)
        else:
            out.setdefault(run, at)
    return out


def load(store: Store, warn: Callable[[str], None] = lambda s: None) -> Gone:
    """The notes of earlier passes; none when the file is missing or unreadable (a torn write, a
    hand edit): they only save requests, so a bad file costs the lookups again, never a pass."""
    data = store.read_bytes_if_exists(PATH)  # one open: `exists` first would cost S3 a HEAD and a listing more
    if data is None:
        return Gone()
    try:
        saved = json.loads(data)
        return Gone(runs=_times(saved.get("runs", {})), suspected=_times(saved.get("suspected", {})),
                    pulls=_numbers(saved.get("pulls", {})), pulls_suspected=_numbers(saved.get("pulls_suspected", {})))
    except (ValueError, TypeError, AttributeError) as exc:
        warn(f"{store.display(PATH)} is unreadable ({exc}): deleted runs and pull requests are asked about "
             "again, and the file is written anew")
        return Gone(changed=True)


def _times(runs: dict) -> dict[str, str]:
    return {str(k): dt.datetime.fromisoformat(at).isoformat() for k, at in runs.items()}


def _numbers(pulls: dict) -> dict[str, list[int]]:
    return {str(repo): sorted(int(n) for n in numbers) for repo, numbers in pulls.items()}


def save(store: Store, gone: Gone) -> None:
    if gone.changed:
        notes = gone.merged_into(load(store))
        saved = {"runs": notes.runs, "suspected": notes.suspected, "pulls": notes.pulls,
                 "pulls_suspected": notes.pulls_suspected}
        store.write_bytes(PATH, json.dumps(saved, indent=1, sort_keys=True).encode())
