-- Schema of the CRM benchmark, exactly as bench/SPEC.md ("Database") defines it.
-- Applied by bench::pg::TempPostgres::create_seeded_db before the seed (bench::seed).

CREATE TABLE world (
    id           integer PRIMARY KEY,
    randomnumber integer NOT NULL
);

CREATE TABLE users (
    id             bigint PRIMARY KEY,
    email          text UNIQUE NOT NULL,
    name           text NOT NULL,
    password_hash  text NOT NULL,
    totp_secret    text,
    recovery_codes text,
    created_at     timestamptz NOT NULL
);

CREATE TABLE deals (
    id           bigserial PRIMARY KEY,
    owner_id     bigint NOT NULL REFERENCES users (id),
    title        text NOT NULL,
    amount_cents bigint NOT NULL,
    stage        text NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);

CREATE INDEX deals_created_at_id_idx ON deals (created_at DESC, id DESC);
