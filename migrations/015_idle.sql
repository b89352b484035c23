-- When the API received the delivery that made a job (#32). A delivery
-- queued while the database resumed is handled after later ones that went
-- straight in, so it gets a higher job number: superseding goes by this
-- time instead, and the job number only breaks ties. Null for jobs made
-- before this column and for jobs no delivery made: their created_at stands in.
alter table jobs add column received_at timestamptz;
