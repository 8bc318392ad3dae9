-- PyTorch's test id of a test of the lake (`lists.pytorch_key`, which the Python side calls):
-- "test_x (__main__.TestY)", the classname's last part; a test outside a class (classname empty)
-- is "test_x (__main__)", since an empty class word would disable the method in every class of
-- PyTorch's runner (`issue_text.runner_key`). A macro, so every query keys tests alike.
CREATE OR REPLACE TEMP MACRO pytorch_key(name, classname) AS
    name || CASE WHEN coalesce(regexp_extract(classname, '[^.]+$'), '') = '' THEN ' (__main__)'
                 ELSE ' (__main__.' || regexp_extract(classname, '[^.]+$') || ')' END
