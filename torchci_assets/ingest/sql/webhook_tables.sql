-- The typed webhook tables of a day, each reduced from its staged rows (view stage: every
-- delivery of the day for that table, copies left out) to one row per key. A field's value is the
-- one on the highest-ranked delivery that has it; the ordering breaks exact ties on the archive
-- location, so the result never depends on scan order. (arg_max skips the rows whose value is
-- NULL: it takes the value of the highest-ranked delivery that has one.)

-- step: stage
-- the staged rows of every scan, without the deliveries that table copies lists for their file
CREATE OR REPLACE TEMP VIEW stage AS
SELECT * EXCLUDE (filename) FROM read_parquet([{{files}}], filename = true) s
WHERE s.delivery_id NOT IN (SELECT c.delivery_id FROM copies c WHERE c.filename = s.filename)

-- step: stage_without_copies
-- the same when no scan held copies (a day of one scan, as every small day): each statement
-- that reads the view then has no anti-join to plan
CREATE OR REPLACE TEMP VIEW stage AS SELECT * FROM read_parquet([{{files}}])

-- step: bad_timestamps
-- the rows with a value of one of the columns (text) that is not a timestamp, each such value a
-- reject: the values, and in the same order whether each one is. One pass over the staged rows
-- for all of a table's columns.
SELECT location, vals, list_transform(vals, lambda v: v IS NOT NULL AND TRY_CAST(v AS TIMESTAMPTZ) IS NULL) AS bad
FROM (SELECT location, [{{columns}}] AS vals FROM stage)
WHERE list_bool_or(list_transform(vals, lambda v: v IS NOT NULL AND TRY_CAST(v AS TIMESTAMPTZ) IS NULL))

-- step: workflow_job
WITH ranked AS (
    SELECT *, status_rank(status) AS rank
    FROM stage
),
-- one HUGEINT ordering key (state, then arrival, then a hash of the archive location
-- for exact ties): arg_max on it is several times faster than on a struct
obs AS (SELECT *, (rank::HUGEINT << 110) + (epoch_ms(received_at)::HUGEINT << 64)
                  + hash(location)::HUGEINT AS key FROM ranked),
-- a job id belongs to one run attempt, so a job is its id: a delivery from an older GitHub,
-- without run_attempt, is of the attempt its other deliveries name (the first one when none does)
job AS (
    SELECT id, coalesce(arg_max(run_attempt, key), 1) AS run_attempt,
           arg_max(run_id, key) AS run_id,
           arg_max(repo, key) AS repo,
           arg_max(workflow_name, key) AS workflow_name,
           arg_max(name, key) AS name,
           arg_max(head_sha, key) AS head_sha,
           arg_max(head_branch, key) AS head_branch,
           arg_max(status, key) AS status,
           arg_max(conclusion, key) AS conclusion,
           arg_max(created_at, key) AS created_at,
           arg_max(started_at, key) AS started_at,
           arg_max(completed_at, key) AS completed_at,
           arg_max(labels, key) AS labels,
           arg_max(runner_name, key) AS runner_name,
           arg_max(build_env, key) AS build_env,
           arg_max(test_config, key) AS test_config,
           arg_max(shard, key) AS shard,
           arg_max(num_shards, key) AS num_shards,
           arg_max(platform, key) AS platform,
           min(received_at) FILTER (WHERE rank = 1) AS first_queued_at,
           max(received_at) AS received_at
    FROM obs GROUP BY id
)
SELECT id, run_id, run_attempt, repo, workflow_name, name, head_sha, head_branch, status,
       conclusion, created_at, started_at, completed_at, labels, runner_name,
       epoch(started_at) - epoch(coalesce(created_at, first_queued_at)) AS queue_s,
       epoch(completed_at) - epoch(started_at) AS duration_s,
       build_env, test_config, shard, num_shards, platform, received_at
FROM (SELECT * REPLACE (TRY_CAST(created_at AS TIMESTAMPTZ) AS created_at,
                        TRY_CAST(started_at AS TIMESTAMPTZ) AS started_at,
                        TRY_CAST(completed_at AS TIMESTAMPTZ) AS completed_at) FROM job)
ORDER BY run_id, id, run_attempt

-- step: workflow_run
SELECT id, run_attempt,
       arg_max(repo, (rank, updated_at, received_at, location)) AS repo,
       arg_max(name, (rank, updated_at, received_at, location)) AS name,
       arg_max(workflow_id, (rank, updated_at, received_at, location)) AS workflow_id,
       arg_max(event, (rank, updated_at, received_at, location)) AS event,
       arg_max(head_sha, (rank, updated_at, received_at, location)) AS head_sha,
       arg_max(head_branch, (rank, updated_at, received_at, location)) AS head_branch,
       arg_max(status, (rank, updated_at, received_at, location)) AS status,
       arg_max(conclusion, (rank, updated_at, received_at, location)) AS conclusion,
       min(TRY_CAST(created_at AS TIMESTAMPTZ)) AS created_at,
       max(TRY_CAST(updated_at AS TIMESTAMPTZ)) AS updated_at
FROM (SELECT *, status_rank(status) AS rank
      FROM stage)
GROUP BY id, run_attempt ORDER BY id, run_attempt

-- step: push
SELECT repo, ref, before, after, forced, created, deleted, head_commit_id,
       TRY_CAST(head_commit_timestamp AS TIMESTAMPTZ) AS head_commit_timestamp, commit_count, commits,
       received_at, delivery_id
FROM stage ORDER BY received_at, delivery_id

-- step: pull_request
SELECT repo, number, action, state, head_sha, head_ref, base_ref, labels, merged,
       TRY_CAST(updated_at AS TIMESTAMPTZ) AS updated_at, author, closes, received_at, delivery_id
FROM stage ORDER BY received_at, delivery_id

-- step: staged
-- the staged rows as they are kept in the partition (hidden `_stage*` files) for the increments
SELECT * FROM stage

-- step: staged_count
SELECT count(*) FROM stage

-- step: keep_increment
CREATE OR REPLACE TEMP TABLE increment AS SELECT * FROM stage

-- step: stage_with_earlier
-- an increment's staged rows (table increment) with those the day's earlier ingests kept (earlier)
CREATE OR REPLACE TEMP VIEW stage AS
SELECT * FROM earlier UNION ALL BY NAME SELECT * FROM increment

-- step: touched_ids
-- the job or run ids an increment's deliveries name: only their rows are reduced again
CREATE OR REPLACE TEMP TABLE touched AS SELECT DISTINCT id FROM increment WHERE id IS NOT NULL

-- step: touched_list
SELECT id FROM touched

-- step: merged_workflow_job
-- (view current: the table as the day's earlier ingests left it)
-- the rows of the ids the increment leaves alone, as they were, and those of the ids it names,
-- reduced again from all of their deliveries: the table a reduction of the whole day gives
SELECT * EXCLUDE (day) FROM current WHERE id NOT IN (SELECT id FROM touched)
UNION ALL BY NAME SELECT * FROM reduced
ORDER BY run_id, id, run_attempt

-- step: merged_workflow_run
SELECT * EXCLUDE (day) FROM current WHERE id NOT IN (SELECT id FROM touched)
UNION ALL BY NAME SELECT * FROM reduced
ORDER BY id, run_attempt
