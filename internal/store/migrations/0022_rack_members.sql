-- One source of rack membership (issue 35): a rack's nodes list alone
-- says which nodes it holds, and a node is listed by one rack at most.
-- Until now a node that no rack listed belonged to the rack its rack
-- label named, and a node two racks listed to the first by name. This
-- writes those memberships into the lists, once: a rack keeps the nodes
-- no rack before it by name lists, and gains the nodes labelled with its
-- name that no rack lists.
{{- if .Postgres}}
UPDATE racks SET nodes = (
    SELECT COALESCE(json_agg(m.name ORDER BY m.pos, m.name), '[]'::json)::text FROM (
        SELECT j.value AS name, j.pos AS pos
        FROM json_array_elements_text(racks.nodes::json) WITH ORDINALITY AS j(value, pos)
        WHERE NOT EXISTS (SELECT 1 FROM racks AS o, json_array_elements_text(o.nodes::json) AS oj(value)
                          WHERE o.name < racks.name AND oj.value = j.value)
        UNION ALL
        SELECT n.name, 9223372036854775807 FROM nodes AS n
        WHERE n.labels::json ->> 'rack' = racks.name
          AND NOT EXISTS (SELECT 1 FROM racks AS o, json_array_elements_text(o.nodes::json) AS oj(value)
                          WHERE oj.value = n.name)
    ) AS m
);
{{- else}}
UPDATE racks SET nodes = (
    SELECT json_group_array(m.name) FROM (
        SELECT j.value AS name FROM json_each(racks.nodes) AS j
        WHERE NOT EXISTS (SELECT 1 FROM racks AS o, json_each(o.nodes) AS oj
                          WHERE o.name < racks.name AND oj.value = j.value)
        UNION ALL
        SELECT n.name FROM nodes AS n
        WHERE json_extract(n.labels, '$.rack') = racks.name
          AND NOT EXISTS (SELECT 1 FROM racks AS o, json_each(o.nodes) AS oj
                          WHERE oj.value = n.name)
    ) AS m
);
{{- end}}
