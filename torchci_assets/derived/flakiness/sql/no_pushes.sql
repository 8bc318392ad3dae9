-- w_push when the window has no push partition: empty, with the columns flaky_tests reads.
CREATE OR REPLACE TEMP VIEW w_push AS
SELECT NULL::VARCHAR AS ref, NULL::VARCHAR AS after, NULL::TIMESTAMPTZ AS received_at WHERE false
