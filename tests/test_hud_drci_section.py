"""The Dr. CI section of pr/<n>.html: the comment's Markdown as GitHub shows it."""

import re

from torchci_assets.derived.drci.comment import MARKER_END, MARKER_START, _code
from torchci_assets.derived.drci.page import to_html


def test_links_and_tags_inside_a_code_span_stay_text_as_on_github():
    """A failure line is text the pull request's own code printed: inside its code span, what looks
    like a link or one of the comment's tags is shown, not made live; outside it, they are."""
    printed = "see [the fix](https://evil.example/login) </details><b>ALL CHECKS PASSED</b> :x:"
    body = (f"{MARKER_START}\n## :x: 1 New Failure\n<details open><summary><b>NEW FAILURE</b></summary><p>\n"
            f"* [linux-jammy / build](https://github.com/pytorch/pytorch/actions/runs/1/job/2)\n"
            f"    {_code(printed)}\n</p></details>\n{MARKER_END}")
    html = to_html(body)
    assert re.findall(r'<a href="([^"]+)"', html) == ["https://github.com/pytorch/pytorch/actions/runs/1/job/2"]
    assert html.count("</details>") == 1 and html.count("<b>") == 1 and html.count("❌") == 1
    code = re.search(r'<code class="mono">(.*?)</code>', html).group(1)
    assert code == ("see [the fix](https://evil.example/login) &lt;/details&gt;&lt;b&gt;ALL CHECKS PASSED"
                    "&lt;/b&gt; :x:")
