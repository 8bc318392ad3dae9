"""What GitHub answered gap repair 404 for: workflow runs and pull requests deleted on GitHub.

A deleted run's jobs stay in the lake unfinished for the two days gap repair reads, and a deleted
pull request stays open in `pr_jobs` for good: nothing in the lake changes to say they are gone.
Asked again, GitHub would answer 404 again, every pass (runs) or every hour (pull requests). So the
pass that hears 404 notes it in the archive (`gap-repair/gone.json`), and later passes do not ask.
A run is forgotten once it is older than what gap repair reads; a pull request once the lake no
longer shows it open. Two passes writing at once may lose one's notes: that costs a request again,
nothing else.
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
        if sorted(numbers) != self.pulls.get(repo, []):
            self.pulls[repo] = sorted(numbers)
            self.changed = True

    def forget_runs_before(self, oldest: dt.datetime) -> None:
        kept = {k: at for k, at in self.runs.items() if dt.datetime.fromisoformat(at) >= oldest}
        self.changed |= len(kept) != len(self.runs)
        self.runs = kept


def load(store: Store, warn: Callable[[str], None] = lambda s: None) -> Gone:
    """The notes of earlier passes; none when the file is missing or unreadable (a torn write, a
    hand edit): they only save requests, so a bad file costs the lookups again, never a pass."""
    if not store.exists(PATH):
        return Gone()
    try:
        saved = json.loads(store.read_bytes(PATH))
        return Gone(runs={str(k): dt.datetime.fromisoformat(at).isoformat() for k, at in saved.get("runs", {}).items()},
                    pulls={str(repo): sorted(int(n) for n in numbers) for repo, numbers in saved.get("pulls", {}).items()})
    except (ValueError, TypeError, AttributeError) as exc:
        warn(f"{store.display(PATH)} is unreadable ({exc}): deleted runs and pull requests are asked about "
             "again, and the file is written anew")
        return Gone(changed=True)


def save(store: Store, gone: Gone) -> None:
    if gone.changed:
        store.write_bytes(PATH, json.dumps({"runs": gone.runs, "pulls": gone.pulls}, indent=1,
                                           sort_keys=True).encode())
