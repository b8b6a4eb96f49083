-- pglimit schema 001: the seed's RateLimitRule and RateLimitViolation tables,
-- extended for every algorithm of the limiter, and a trigger that tells
-- listeners when the rules change.
--
-- Idempotent: it creates what is missing and upgrades a RateLimitRule or
-- RateLimitViolation table created from the seed's definition in place.
-- pglimit.Migrate runs it in one transaction under an advisory lock, so
-- instances starting together do not race.
--
-- Values are not checked here: pglimit checks every row when it loads the
-- rules, reports a bad one with its rule_id and field, and keeps the rules
-- in force. One set of checks, in one place.

CREATE TABLE IF NOT EXISTS RateLimitRule (
    rule_id          BIGSERIAL PRIMARY KEY,
    key_pattern      VARCHAR(128)  NOT NULL,  -- 'user:{user_id}', 'endpoint:/api/search', 'global'
    scope            VARCHAR(32)   NOT NULL,  -- 'user', 'endpoint', 'global', 'ip', 'dim:NAME'
    rate_per_second  FLOAT,                   -- tokens added per second
    burst_capacity   INT           NOT NULL,  -- max tokens in bucket, or requests per window
    plan             VARCHAR(32),             -- NULL: every plan
    is_active        BOOLEAN       NOT NULL DEFAULT TRUE,
    description      TEXT,
    created_at       TIMESTAMPTZ   NOT NULL DEFAULT NOW(),
    UNIQUE (key_pattern, plan)
);

-- The seed requires a rate per second; window algorithms have none, and a
-- rate may be given as rate per period instead.
ALTER TABLE RateLimitRule ALTER COLUMN rate_per_second DROP NOT NULL;

ALTER TABLE RateLimitRule
    -- The rule's name in bucket keys, headers and metrics. NULL: derived
    -- from key_pattern and plan ('user:{user_id}' for plan 'free' is
    -- 'user.free').
    ADD COLUMN IF NOT EXISTS name          VARCHAR(64),
    -- token_bucket, shaping, fixed_window, sliding_window or sliding_log.
    ADD COLUMN IF NOT EXISTS algorithm     VARCHAR(32)  NOT NULL DEFAULT 'token_bucket',
    -- The refill rate as rate tokens every period, instead of rate_per_second.
    ADD COLUMN IF NOT EXISTS rate          BIGINT,
    ADD COLUMN IF NOT EXISTS period        INTERVAL,
    -- The window of fixed_window, sliding_window and sliding_log
    -- (WINDOW is a reserved word).
    ADD COLUMN IF NOT EXISTS window_length INTERVAL,
    -- The longest delay of a shaping rule.
    ADD COLUMN IF NOT EXISTS max_wait      INTERVAL,
    -- Route selectors the rule is limited to ('GET /search', '/search',
    -- 'POST'); empty: every route.
    ADD COLUMN IF NOT EXISTS routes        TEXT[]       NOT NULL DEFAULT '{}',
    -- Decided and reported, never denying.
    ADD COLUMN IF NOT EXISTS shadow        BOOLEAN      NOT NULL DEFAULT FALSE;

-- UNIQUE (key_pattern, plan) lets two rows with a NULL plan share a key
-- pattern, for NULLs are distinct; both would be rule 'user', every plan.
-- Refuse that too (UNIQUE NULLS NOT DISTINCT needs PostgreSQL 15).
CREATE UNIQUE INDEX IF NOT EXISTS ratelimitrule_key_pattern_every_plan
    ON RateLimitRule (key_pattern) WHERE plan IS NULL;

-- Every change to the rules, including TRUNCATE, is announced on the
-- channel ratelimit_rules once per statement, when its transaction
-- commits. The payload is the operation; listeners reload everything.
CREATE OR REPLACE FUNCTION ratelimitrule_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ratelimit_rules', TG_OP);
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS ratelimitrule_notify ON RateLimitRule;
CREATE TRIGGER ratelimitrule_notify
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON RateLimitRule
    FOR EACH STATEMENT EXECUTE FUNCTION ratelimitrule_notify();

-- The audit log of denied requests (the seed's, for monitoring).
CREATE TABLE IF NOT EXISTS RateLimitViolation (
    violation_id   BIGSERIAL PRIMARY KEY,
    bucket_key     VARCHAR(256)  NOT NULL,
    -- TEXT, not the seed's BIGINT: user identities are strings (a UUID, an
    -- e-mail, an API key id), as the limiter's Request.User is.
    user_id        TEXT,
    ip_address     INET,
    endpoint       VARCHAR(255),
    requested_at   TIMESTAMPTZ   NOT NULL DEFAULT NOW(),
    tokens_at_time FLOAT         NOT NULL,
    -- SET NULL: deleting a rule keeps its history.
    rule_id        BIGINT        REFERENCES RateLimitRule (rule_id) ON DELETE SET NULL
);

-- A table made from the seed has user_id BIGINT: widen it to TEXT, keeping
-- the ids.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'ratelimitviolation'
                 AND column_name = 'user_id' AND data_type <> 'text') THEN
        ALTER TABLE RateLimitViolation ALTER COLUMN user_id TYPE TEXT USING user_id::text;
    END IF;
END
$$;

-- Denials by rules in shadow mode (decided and reported, never denying):
-- the request went ahead.
ALTER TABLE RateLimitViolation ADD COLUMN IF NOT EXISTS shadow BOOLEAN NOT NULL DEFAULT FALSE;

CREATE INDEX IF NOT EXISTS idx_violation_user ON RateLimitViolation (user_id, requested_at DESC);
CREATE INDEX IF NOT EXISTS idx_violation_ip   ON RateLimitViolation (ip_address, requested_at DESC);
