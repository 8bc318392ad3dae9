-- status_rank(status): how far a job or a run had got (GitHub's `status` of a workflow_job or
-- workflow_run) when a delivery or a REST read saw it. Deliveries arrive out of order and twice,
-- so every query that keeps one state of a job or run keeps the highest: a completed job stays
-- completed whatever `in_progress` delivery comes after it, and any state GitHub named beats none
-- (a NULL status, or one GitHub added since, ranks 0). Ties go to the query's own next key (the
-- time GitHub updated it, the delivery's arrival). One definition for every domain's queries, in
-- every lake connection (`resources.lake.connect`): two rankings would keep two different states.
CREATE OR REPLACE MACRO status_rank(status) AS
    CASE status WHEN 'completed' THEN 4 WHEN 'in_progress' THEN 3 WHEN 'waiting' THEN 2
                WHEN 'queued' THEN 1 WHEN 'pending' THEN 1 WHEN 'requested' THEN 1 ELSE 0 END
