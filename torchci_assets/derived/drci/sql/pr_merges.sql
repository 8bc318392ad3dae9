-- The main commits that landed a pull request, from one webhook_events file (view src): the
-- merge_commit_sha of a pull_request webhook saying it merged, and each commit of a push whose message
-- carries the line PyTorch's merge bot writes ("Pull Request resolved: https://github.com/OWNER/NAME/pull/N").
-- A pull request's own commit failing on main is its own failure, not the trunk's.
WITH pushed AS (
    SELECT unnest(json_extract(payload, '$.commits[*]')) AS c
    FROM src
    WHERE event = 'push'
),
resolved AS (
    SELECT regexp_extract(json_extract_string(c, '$.message'),
                          'Pull Request resolved: https?://[^/\s]+/([^/\s]+/[^/\s]+)/pull/(\d+)', ['repo', 'n']) AS m,
           json_extract_string(c, '$.id') AS sha
    FROM pushed
)
SELECT m.repo AS repo, TRY_CAST(m.n AS BIGINT) AS number, sha
FROM resolved
WHERE m.n <> '' AND sha IS NOT NULL
UNION ALL
SELECT repo, TRY_CAST(json_extract(payload, '$.pull_request.number') AS BIGINT) AS number,
       json_extract_string(payload, '$.pull_request.merge_commit_sha') AS sha
FROM src
WHERE event = 'pull_request' AND TRY_CAST(json_extract(payload, '$.pull_request.merged') AS BOOLEAN)
  AND json_extract_string(payload, '$.pull_request.merge_commit_sha') IS NOT NULL
