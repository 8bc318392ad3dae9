-- The machine a job waits for and runs on, as its runner labels name it: its first label that is not
-- one of GitHub's default self-hosted labels (self-hosted; linux, windows, macOS; x64, ARM, ARM64), in
-- any case, as GitHub matches labels. `runs-on: [self-hosted, linux, gpu-a100]` is `gpu-a100`, PyTorch's
-- `linux.2xlarge` and GitHub's hosted `ubuntu-latest` are themselves. A job asking for default labels
-- alone (any self-hosted Linux x64 runner) is those labels as its workflow lists them; NULL without any.
-- A macro, so the queue alerts and the metrics group jobs alike.
CREATE OR REPLACE TEMP MACRO runner_machine(labels) AS
    coalesce(list_filter(labels, lambda x: lower(x) NOT IN ('self-hosted', 'linux', 'windows', 'macos',
                                                             'x64', 'arm', 'arm64'))[1],
             nullif(array_to_string(labels, ', '), ''))
