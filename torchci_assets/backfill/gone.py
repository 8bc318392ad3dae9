"""What GitHub answered gap repair 404 for: workflow runs and pull requests deleted on GitHub.

A deleted run's jobs stay in the lake unfinished for the two days gap repair reads, and a deleted
pull request stays open in `pr_jobs` for good: nothing in the lake changes to say they are gone.
Asked again, GitHub would answer 404 again, every pass (runs) or every hour (pull requests). So the
pass that hears 404 notes it in the archive (`gap-repair/gone.json`), and later passes do not ask.
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
    pulls: dict[str, list[int]] = field(default_factory=dict)  # "owner/repo" -> pull request numbers
    changed: bool = False
    set_repos: set[str] = field(default_factory=set)  # the repositories whose pulls this pass decided
    oldest: dt.datetime | None = None  # runs noted before this are forgotten

    @staticmethod
    def run_key(key: tuple[str, int, int]) -> str:
        repo, run_id, attempt = key
        return f"{repo}#{run_id}/{attempt}"

    def has_run(self, key: tuple[str, int, int]) -> bool:
        return self.run_key(key) in self.runs

    def add_run(self, key: tuple[str, int, int], now: dt.datetime) -> None:
        self.runs[self.run_key(key)] = now.isoformat()
        self.changed = True

    def set_pulls(self, repo: str, numbers: list[int]) -> None:
        """The pull requests of `repo` GitHub no longer has that the lake still shows open."""
        self.set_repos.add(repo)
        if sorted(numbers) != self.pulls.get(repo, []):
            self.pulls[repo] = sorted(numbers)
            self.changed = True

    def forget_runs_before(self, oldest: dt.datetime) -> None:
        self.oldest = oldest
        kept = self._recent(self.runs)
        self.changed |= len(kept) != len(self.runs)
        self.runs = kept

    def _recent(self, runs: dict[str, str]) -> dict[str, str]:
        if self.oldest is None:
            return runs
        return {k: at for k, at in runs.items() if dt.datetime.fromisoformat(at) >= self.oldest}

    def merged_into(self, on_file: "Gone") -> "Gone":
        """These notes over what another pass wrote since they were read: every run either noted
        (less those too old), and the pull requests of the repositories this pass looked at."""
        pulls = {**on_file.pulls, **{repo: self.pulls[repo] for repo in self.set_repos if repo in self.pulls}}
        return Gone(runs=self._recent({**on_file.runs, **self.runs}), pulls=pulls)


def load(store: Store, warn: Callable[[str], None] = lambda s: None) -> Gone:
    """The notes of earlier passes; none when the file is missing or unreadable (a torn write, a
    hand edit): they only save requests, so a bad file costs the lookups again, never a pass."""
    data = store.read_bytes_if_exists(PATH)  # one open: `exists` first would cost S3 a HEAD and a listing more
    if data is None:
        return Gone()
    try:
        saved = json.loads(data)
        return Gone(runs={str(k): dt.datetime.fromisoformat(at).isoformat() for k, at in saved.get("runs", {}).items()},
                    pulls={str(repo): sorted(int(n) for n in numbers) for repo, numbers in saved.get("pulls", {}).items()})
    except (ValueError, TypeError, AttributeError) as exc:
        warn(f"{store.display(PATH)} is unreadable ({exc}): deleted runs and pull requests are asked about "
             "again, and the file is written anew")
        return Gone(changed=True)


def save(store: Store, gone: Gone) -> None:
    if gone.changed:
        notes = gone.merged_into(load(store))
        store.write_bytes(PATH, json.dumps({"runs": notes.runs, "pulls": notes.pulls}, indent=1,
                                           sort_keys=True).encode())
