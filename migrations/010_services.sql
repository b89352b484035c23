-- Service containers (issue #34): the containers the docker executor starts
-- beside a task's script, as the pipeline compiled them
-- ([{name, image, env, ports, health, healthTimeoutS}], in file order). The
-- claim hands them to the runner with the task; an empty list is the default
-- and fills existing rows without a rewrite.
alter table tasks add column services jsonb not null default '[]';
