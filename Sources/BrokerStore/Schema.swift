/// The broker's schema as one versioned list of migrations, each written once per dialect, so that the
/// SQLite and PostgreSQL stores can never drift apart in what they hold: version N means the same tables on
/// both. A store applies the versions it lacks in order, each once, and refuses a database that records a
/// version this binary does not know (a newer broker migrated it; running an older one would write rows the
/// newer schema does not expect).
///
/// Rules for adding one: append (never edit or reorder a released migration), keep both dialects' tables and
/// columns identical in name and meaning, and keep `BrokerStore.copy` (`broker db copy`) in step.
package enum Schema {
    package struct Migration: Sendable {
        package let version: Int
        package let name: String
        package let sqlite: String
        package let postgres: String

        /// The identifier SQLite's GRDB migrator records (the first three predate this list and keep theirs).
        package var identifier: String { "v\(version): \(name)" }
    }

    /// The newest version this binary knows.
    package static var current: Int { migrations.last?.version ?? 0 }

    package static let migrations: [Migration] = [
        Migration(
            version: 1,
            name: "users, password accounts, sessions, refresh tokens",
            sqlite: """
                CREATE TABLE users (
                    id TEXT PRIMARY KEY NOT NULL,
                    provider TEXT NOT NULL,
                    subject TEXT NOT NULL,
                    email TEXT,
                    name TEXT,
                    created_at INTEGER NOT NULL
                );
                CREATE TABLE password_accounts (
                    email TEXT PRIMARY KEY NOT NULL,
                    user_id TEXT NOT NULL UNIQUE REFERENCES users(id) ON DELETE CASCADE,
                    password_hash TEXT NOT NULL,
                    updated_at INTEGER NOT NULL
                );
                CREATE TABLE sessions (
                    id TEXT PRIMARY KEY NOT NULL,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    client_id TEXT NOT NULL,
                    scope TEXT,
                    created_at INTEGER NOT NULL,
                    revoked_at INTEGER
                );
                CREATE INDEX sessions_user ON sessions(user_id);
                CREATE TABLE refresh_tokens (
                    hash TEXT PRIMARY KEY NOT NULL,
                    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                    created_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL,
                    used_at INTEGER
                );
                CREATE INDEX refresh_tokens_session ON refresh_tokens(session_id);
                CREATE INDEX refresh_tokens_expiry ON refresh_tokens(expires_at);
                """,
            postgres: """
                CREATE TABLE users (
                    id TEXT PRIMARY KEY,
                    provider TEXT NOT NULL,
                    subject TEXT NOT NULL,
                    email TEXT,
                    name TEXT,
                    created_at BIGINT NOT NULL
                );
                CREATE TABLE password_accounts (
                    email TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL UNIQUE REFERENCES users(id) ON DELETE CASCADE,
                    password_hash TEXT NOT NULL,
                    updated_at BIGINT NOT NULL
                );
                CREATE TABLE sessions (
                    id TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    client_id TEXT NOT NULL,
                    scope TEXT,
                    created_at BIGINT NOT NULL,
                    revoked_at BIGINT
                );
                CREATE INDEX sessions_user ON sessions(user_id);
                CREATE TABLE refresh_tokens (
                    hash TEXT PRIMARY KEY,
                    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                    created_at BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    used_at BIGINT
                );
                CREATE INDEX refresh_tokens_session ON refresh_tokens(session_id);
                CREATE INDEX refresh_tokens_expiry ON refresh_tokens(expires_at);
                """
        ),
        Migration(
            version: 2,
            name: "CI clients, exchanged subject tokens",
            sqlite: """
                CREATE TABLE clients (
                    name TEXT PRIMARY KEY NOT NULL,
                    secret_hash TEXT NOT NULL,
                    scopes TEXT NOT NULL,
                    trust_issuer TEXT,
                    trust_subject TEXT,
                    trust_audience TEXT,
                    trust_max_age INTEGER,
                    created_at INTEGER NOT NULL
                );
                CREATE TABLE exchanged_tokens (
                    issuer TEXT NOT NULL,
                    jti TEXT NOT NULL,
                    expires_at INTEGER NOT NULL,
                    PRIMARY KEY (issuer, jti)
                );
                CREATE INDEX exchanged_tokens_expiry ON exchanged_tokens(expires_at);
                """,
            postgres: """
                CREATE TABLE clients (
                    name TEXT PRIMARY KEY,
                    secret_hash TEXT NOT NULL,
                    scopes TEXT NOT NULL,
                    trust_issuer TEXT,
                    trust_subject TEXT,
                    trust_audience TEXT,
                    trust_max_age BIGINT,
                    created_at BIGINT NOT NULL
                );
                CREATE TABLE exchanged_tokens (
                    issuer TEXT NOT NULL,
                    jti TEXT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    PRIMARY KEY (issuer, jti)
                );
                CREATE INDEX exchanged_tokens_expiry ON exchanged_tokens(expires_at);
                """
        ),
        Migration(
            version: 3,
            name: "browser flow codes and state markers",
            sqlite: """
                CREATE TABLE authorization_codes (
                    hash TEXT PRIMARY KEY NOT NULL,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    code_challenge TEXT NOT NULL,
                    redirect_uri TEXT NOT NULL,
                    expires_at INTEGER NOT NULL,
                    used_at INTEGER,
                    session_id TEXT
                );
                CREATE INDEX authorization_codes_expiry ON authorization_codes(expires_at);
                CREATE TABLE state_markers (
                    marker TEXT PRIMARY KEY NOT NULL,
                    expires_at INTEGER NOT NULL
                );
                CREATE INDEX state_markers_expiry ON state_markers(expires_at);
                """,
            postgres: """
                CREATE TABLE authorization_codes (
                    hash TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    code_challenge TEXT NOT NULL,
                    redirect_uri TEXT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    used_at BIGINT,
                    session_id TEXT
                );
                CREATE INDEX authorization_codes_expiry ON authorization_codes(expires_at);
                CREATE TABLE state_markers (
                    marker TEXT PRIMARY KEY,
                    expires_at BIGINT NOT NULL
                );
                CREATE INDEX state_markers_expiry ON state_markers(expires_at);
                """
        ),
        Migration(
            version: 4,
            name: "sealed signing and secret keys, shared login throttle",
            sqlite: """
                CREATE TABLE signing_keys (
                    kid TEXT PRIMARY KEY NOT NULL,
                    algorithm TEXT NOT NULL,
                    sealed_key TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    retired_at INTEGER
                );
                CREATE UNIQUE INDEX signing_keys_one_current ON signing_keys((retired_at IS NULL))
                    WHERE retired_at IS NULL;
                CREATE TABLE secret_keys (
                    name TEXT PRIMARY KEY NOT NULL,
                    sealed_key TEXT NOT NULL,
                    created_at INTEGER NOT NULL
                );
                CREATE TABLE login_throttle (
                    key TEXT PRIMARY KEY NOT NULL,
                    failures INTEGER NOT NULL,
                    last_failure REAL NOT NULL,
                    blocked_until REAL NOT NULL,
                    in_flight INTEGER NOT NULL,
                    in_flight_since REAL NOT NULL
                );
                """,
            postgres: """
                CREATE TABLE signing_keys (
                    kid TEXT PRIMARY KEY,
                    algorithm TEXT NOT NULL,
                    sealed_key TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    retired_at BIGINT
                );
                CREATE UNIQUE INDEX signing_keys_one_current ON signing_keys((retired_at IS NULL))
                    WHERE retired_at IS NULL;
                CREATE TABLE secret_keys (
                    name TEXT PRIMARY KEY,
                    sealed_key TEXT NOT NULL,
                    created_at BIGINT NOT NULL
                );
                CREATE TABLE login_throttle (
                    key TEXT PRIMARY KEY,
                    failures INTEGER NOT NULL,
                    last_failure DOUBLE PRECISION NOT NULL,
                    blocked_until DOUBLE PRECISION NOT NULL,
                    in_flight INTEGER NOT NULL,
                    in_flight_since DOUBLE PRECISION NOT NULL
                );
                """
        ),
        Migration(
            version: 5,
            name: "disabled users",
            sqlite: "ALTER TABLE users ADD COLUMN disabled_at INTEGER;",
            postgres: "ALTER TABLE users ADD COLUMN disabled_at BIGINT;"
        ),
        Migration(
            version: 6,
            name: "audit events",
            sqlite: """
                CREATE TABLE audit_events (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    time INTEGER NOT NULL,
                    event TEXT NOT NULL,
                    user_id TEXT,
                    document TEXT NOT NULL
                );
                CREATE INDEX audit_events_time ON audit_events(time);
                CREATE INDEX audit_events_user ON audit_events(user_id, time);
                """,
            postgres: """
                CREATE TABLE audit_events (
                    id BIGSERIAL PRIMARY KEY,
                    time BIGINT NOT NULL,
                    event TEXT NOT NULL,
                    user_id TEXT,
                    document TEXT NOT NULL
                );
                CREATE INDEX audit_events_time ON audit_events(time);
                CREATE INDEX audit_events_user ON audit_events(user_id, time);
                """
        ),
        Migration(
            version: 7,
            name: "single-use mail links (password reset, address verification), verified addresses",
            sqlite: """
                CREATE TABLE email_links (
                    hash TEXT PRIMARY KEY NOT NULL,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    purpose TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL,
                    used_at INTEGER
                );
                CREATE INDEX email_links_user ON email_links(user_id, purpose);
                CREATE INDEX email_links_expiry ON email_links(expires_at);
                ALTER TABLE password_accounts ADD COLUMN email_verified_at INTEGER;
                """,
            postgres: """
                CREATE TABLE email_links (
                    hash TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    purpose TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    used_at BIGINT
                );
                CREATE INDEX email_links_user ON email_links(user_id, purpose);
                CREATE INDEX email_links_expiry ON email_links(expires_at);
                ALTER TABLE password_accounts ADD COLUMN email_verified_at BIGINT;
                """
        ),
        Migration(
            version: 8,
            name: "linked identities (each provider account's user), links pending in one-time codes",
            sqlite: """
                CREATE TABLE identities (
                    provider TEXT NOT NULL,
                    subject TEXT NOT NULL,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    email TEXT,
                    name TEXT,
                    linked_at INTEGER NOT NULL,
                    PRIMARY KEY (provider, subject)
                );
                CREATE UNIQUE INDEX identities_user_provider ON identities(user_id, provider);
                INSERT INTO identities (provider, subject, user_id, email, name, linked_at)
                    SELECT provider, subject, id, email, name, created_at FROM users WHERE provider <> 'custom';
                ALTER TABLE authorization_codes ADD COLUMN link_identity TEXT;
                """,
            postgres: """
                CREATE TABLE identities (
                    provider TEXT NOT NULL,
                    subject TEXT NOT NULL,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    email TEXT,
                    name TEXT,
                    linked_at BIGINT NOT NULL,
                    PRIMARY KEY (provider, subject)
                );
                CREATE UNIQUE INDEX identities_user_provider ON identities(user_id, provider);
                INSERT INTO identities (provider, subject, user_id, email, name, linked_at)
                    SELECT provider, subject, id, email, name, created_at FROM users WHERE provider <> 'custom';
                ALTER TABLE authorization_codes ADD COLUMN link_identity TEXT;
                """
        ),
        Migration(
            version: 9,
            name: "device authorizations (RFC 8628), for sign-ins and links",
            sqlite: """
                CREATE TABLE device_codes (
                    hash TEXT PRIMARY KEY NOT NULL,
                    user_code TEXT NOT NULL UNIQUE,
                    client_id TEXT NOT NULL,
                    provider TEXT,
                    client_address TEXT,
                    created_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL,
                    poll_interval INTEGER NOT NULL,
                    last_polled_at INTEGER,
                    status TEXT NOT NULL,
                    user_id TEXT REFERENCES users(id) ON DELETE CASCADE,
                    link_user TEXT REFERENCES users(id) ON DELETE CASCADE
                );
                CREATE INDEX device_codes_expiry ON device_codes(expires_at);
                """,
            postgres: """
                CREATE TABLE device_codes (
                    hash TEXT PRIMARY KEY,
                    user_code TEXT NOT NULL UNIQUE,
                    client_id TEXT NOT NULL,
                    provider TEXT,
                    client_address TEXT,
                    created_at BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    poll_interval BIGINT NOT NULL,
                    last_polled_at BIGINT,
                    status TEXT NOT NULL,
                    user_id TEXT REFERENCES users(id) ON DELETE CASCADE,
                    link_user TEXT REFERENCES users(id) ON DELETE CASCADE
                );
                CREATE INDEX device_codes_expiry ON device_codes(expires_at);
                """
        ),
        Migration(
            version: 10,
            name: "the way in each session was started with (ended when that way in is unlinked)",
            sqlite: """
                ALTER TABLE sessions ADD COLUMN signed_in_with TEXT;
                ALTER TABLE authorization_codes ADD COLUMN signed_in_with TEXT;
                ALTER TABLE device_codes ADD COLUMN signed_in_with TEXT;
                """,
            postgres: """
                ALTER TABLE sessions ADD COLUMN signed_in_with TEXT;
                ALTER TABLE authorization_codes ADD COLUMN signed_in_with TEXT;
                ALTER TABLE device_codes ADD COLUMN signed_in_with TEXT;
                """
        ),
        Migration(
            version: 11,
            name: "rate limits every broker on the database shares (device sign-ins, wrong codes, mail)",
            sqlite: """
                CREATE TABLE rate_limits (
                    name TEXT NOT NULL,
                    key TEXT NOT NULL,
                    tokens REAL NOT NULL,
                    updated_at REAL NOT NULL,
                    full_at REAL NOT NULL,
                    PRIMARY KEY (name, key)
                );
                CREATE INDEX rate_limits_full ON rate_limits(full_at);
                """,
            postgres: """
                CREATE TABLE rate_limits (
                    name TEXT NOT NULL,
                    key TEXT NOT NULL,
                    tokens DOUBLE PRECISION NOT NULL,
                    updated_at DOUBLE PRECISION NOT NULL,
                    full_at DOUBLE PRECISION NOT NULL,
                    PRIMARY KEY (name, key)
                );
                CREATE INDEX rate_limits_full ON rate_limits(full_at);
                """
        ),
        Migration(
            version: 12,
            name: "a link's code and device approval name the session that asked (they die with it)",
            sqlite: """
                ALTER TABLE authorization_codes ADD COLUMN link_session TEXT;
                ALTER TABLE device_codes ADD COLUMN link_session TEXT;
                """,
            postgres: """
                ALTER TABLE authorization_codes ADD COLUMN link_session TEXT;
                ALTER TABLE device_codes ADD COLUMN link_session TEXT;
                """
        ),
        Migration(
            version: 13,
            name: "apps (relying parties), browser sessions, consents and app codes",
            sqlite: """
                CREATE TABLE apps (
                    client_id TEXT PRIMARY KEY NOT NULL,
                    secret_hash TEXT,
                    redirect_uris TEXT NOT NULL,
                    post_logout_redirect_uris TEXT NOT NULL,
                    backchannel_logout_uri TEXT,
                    first_party INTEGER NOT NULL,
                    id_token_alg TEXT NOT NULL,
                    scopes TEXT NOT NULL,
                    created_at INTEGER NOT NULL
                );
                CREATE TABLE browser_sessions (
                    id TEXT PRIMARY KEY NOT NULL,
                    cookie_hash TEXT NOT NULL UNIQUE,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    signed_in_with TEXT NOT NULL,
                    auth_time INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL,
                    revoked_at INTEGER
                );
                CREATE INDEX browser_sessions_user ON browser_sessions(user_id);
                CREATE INDEX browser_sessions_expiry ON browser_sessions(expires_at);
                CREATE TABLE consents (
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    client_id TEXT NOT NULL REFERENCES apps(client_id) ON DELETE CASCADE,
                    scopes TEXT NOT NULL,
                    granted_at INTEGER NOT NULL,
                    PRIMARY KEY (user_id, client_id)
                );
                CREATE TABLE app_codes (
                    hash TEXT PRIMARY KEY NOT NULL,
                    client_id TEXT NOT NULL REFERENCES apps(client_id) ON DELETE CASCADE,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    redirect_uri TEXT NOT NULL,
                    code_challenge TEXT,
                    scope TEXT NOT NULL,
                    nonce TEXT,
                    auth_time INTEGER NOT NULL,
                    signed_in_with TEXT NOT NULL,
                    browser_session TEXT NOT NULL,
                    expires_at INTEGER NOT NULL,
                    used_at INTEGER,
                    session_id TEXT
                );
                CREATE INDEX app_codes_expiry ON app_codes(expires_at);
                """,
            postgres: """
                CREATE TABLE apps (
                    client_id TEXT PRIMARY KEY,
                    secret_hash TEXT,
                    redirect_uris TEXT NOT NULL,
                    post_logout_redirect_uris TEXT NOT NULL,
                    backchannel_logout_uri TEXT,
                    first_party BIGINT NOT NULL,
                    id_token_alg TEXT NOT NULL,
                    scopes TEXT NOT NULL,
                    created_at BIGINT NOT NULL
                );
                CREATE TABLE browser_sessions (
                    id TEXT PRIMARY KEY,
                    cookie_hash TEXT NOT NULL UNIQUE,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    signed_in_with TEXT NOT NULL,
                    auth_time BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    revoked_at BIGINT
                );
                CREATE INDEX browser_sessions_user ON browser_sessions(user_id);
                CREATE INDEX browser_sessions_expiry ON browser_sessions(expires_at);
                CREATE TABLE consents (
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    client_id TEXT NOT NULL REFERENCES apps(client_id) ON DELETE CASCADE,
                    scopes TEXT NOT NULL,
                    granted_at BIGINT NOT NULL,
                    PRIMARY KEY (user_id, client_id)
                );
                CREATE TABLE app_codes (
                    hash TEXT PRIMARY KEY,
                    client_id TEXT NOT NULL REFERENCES apps(client_id) ON DELETE CASCADE,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    redirect_uri TEXT NOT NULL,
                    code_challenge TEXT,
                    scope TEXT NOT NULL,
                    nonce TEXT,
                    auth_time BIGINT NOT NULL,
                    signed_in_with TEXT NOT NULL,
                    browser_session TEXT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    used_at BIGINT,
                    session_id TEXT
                );
                CREATE INDEX app_codes_expiry ON app_codes(expires_at);
                """
        ),
        Migration(
            version: 14,
            name: "apps signed in through a browser session, the back-channel logout queue, pushed requests, DPoP",
            sqlite: """
                CREATE TABLE app_signins (
                    browser_session TEXT NOT NULL REFERENCES browser_sessions(id) ON DELETE CASCADE,
                    session_id TEXT NOT NULL,
                    client_id TEXT NOT NULL REFERENCES apps(client_id) ON DELETE CASCADE,
                    created_at INTEGER NOT NULL,
                    PRIMARY KEY (browser_session, session_id)
                );
                CREATE INDEX app_signins_session ON app_signins(session_id);
                CREATE TABLE logout_deliveries (
                    id TEXT PRIMARY KEY NOT NULL,
                    client_id TEXT NOT NULL REFERENCES apps(client_id) ON DELETE CASCADE,
                    subject TEXT NOT NULL,
                    sid TEXT NOT NULL,
                    attempts INTEGER NOT NULL,
                    created_at INTEGER NOT NULL,
                    next_attempt_at INTEGER NOT NULL,
                    give_up_at INTEGER NOT NULL
                );
                CREATE INDEX logout_deliveries_due ON logout_deliveries(next_attempt_at);
                CREATE TABLE pushed_requests (
                    hash TEXT PRIMARY KEY NOT NULL,
                    client_id TEXT NOT NULL REFERENCES apps(client_id) ON DELETE CASCADE,
                    parameters TEXT NOT NULL,
                    expires_at INTEGER NOT NULL
                );
                ALTER TABLE apps ADD COLUMN require_par INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE sessions ADD COLUMN dpop_jkt TEXT;
                """,
            postgres: """
                CREATE TABLE app_signins (
                    browser_session TEXT NOT NULL REFERENCES browser_sessions(id) ON DELETE CASCADE,
                    session_id TEXT NOT NULL,
                    client_id TEXT NOT NULL REFERENCES apps(client_id) ON DELETE CASCADE,
                    created_at BIGINT NOT NULL,
                    PRIMARY KEY (browser_session, session_id)
                );
                CREATE INDEX app_signins_session ON app_signins(session_id);
                CREATE TABLE logout_deliveries (
                    id TEXT PRIMARY KEY,
                    client_id TEXT NOT NULL REFERENCES apps(client_id) ON DELETE CASCADE,
                    subject TEXT NOT NULL,
                    sid TEXT NOT NULL,
                    attempts BIGINT NOT NULL,
                    created_at BIGINT NOT NULL,
                    next_attempt_at BIGINT NOT NULL,
                    give_up_at BIGINT NOT NULL
                );
                CREATE INDEX logout_deliveries_due ON logout_deliveries(next_attempt_at);
                CREATE TABLE pushed_requests (
                    hash TEXT PRIMARY KEY,
                    client_id TEXT NOT NULL REFERENCES apps(client_id) ON DELETE CASCADE,
                    parameters TEXT NOT NULL,
                    expires_at BIGINT NOT NULL
                );
                ALTER TABLE apps ADD COLUMN require_par BIGINT NOT NULL DEFAULT 0;
                ALTER TABLE sessions ADD COLUMN dpop_jkt TEXT;
                """
        ),
        Migration(
            version: 15,
            name: "passkeys (WebAuthn credentials) and their users' random handles",
            sqlite: """
                CREATE TABLE passkey_users (
                    user_id TEXT PRIMARY KEY NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    handle TEXT NOT NULL UNIQUE
                );
                CREATE TABLE passkeys (
                    id TEXT PRIMARY KEY NOT NULL,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    public_key TEXT NOT NULL,
                    algorithm INTEGER NOT NULL,
                    sign_count INTEGER NOT NULL,
                    transports TEXT NOT NULL,
                    backup_eligible INTEGER NOT NULL,
                    backed_up INTEGER NOT NULL,
                    aaguid TEXT NOT NULL,
                    name TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    last_used_at INTEGER
                );
                CREATE INDEX passkeys_user ON passkeys(user_id);
                """,
            postgres: """
                CREATE TABLE passkey_users (
                    user_id TEXT PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
                    handle TEXT NOT NULL UNIQUE
                );
                CREATE TABLE passkeys (
                    id TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    public_key TEXT NOT NULL,
                    algorithm BIGINT NOT NULL,
                    sign_count BIGINT NOT NULL,
                    transports TEXT NOT NULL,
                    backup_eligible BIGINT NOT NULL,
                    backed_up BIGINT NOT NULL,
                    aaguid TEXT NOT NULL,
                    name TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    last_used_at BIGINT
                );
                CREATE INDEX passkeys_user ON passkeys(user_id);
                """
        ),
        Migration(
            version: 16,
            name: "recovery addresses: a verified address kept when a passkey account drops its password",
            sqlite: """
                CREATE TABLE recovery_addresses (
                    user_id TEXT PRIMARY KEY NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    email TEXT NOT NULL,
                    verified_at INTEGER NOT NULL
                );
                CREATE INDEX recovery_addresses_email ON recovery_addresses(email);
                """,
            postgres: """
                CREATE TABLE recovery_addresses (
                    user_id TEXT PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
                    email TEXT NOT NULL,
                    verified_at BIGINT NOT NULL
                );
                CREATE INDEX recovery_addresses_email ON recovery_addresses(email);
                """
        ),
        Migration(
            version: 17,
            name: "one authorization code record for the CLI and apps (codes live a minute: those in flight go)",
            sqlite: """
                DROP TABLE authorization_codes;
                DROP TABLE app_codes;
                CREATE TABLE authorization_codes (
                    hash TEXT PRIMARY KEY NOT NULL,
                    client_id TEXT NOT NULL,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    redirect_uri TEXT NOT NULL,
                    code_challenge TEXT,
                    scope TEXT NOT NULL,
                    nonce TEXT,
                    auth_time INTEGER NOT NULL,
                    signed_in_with TEXT NOT NULL,
                    browser_session TEXT,
                    link_identity TEXT,
                    link_session TEXT,
                    expires_at INTEGER NOT NULL,
                    used_at INTEGER,
                    session_id TEXT
                );
                CREATE INDEX authorization_codes_expiry ON authorization_codes(expires_at);
                """,
            postgres: """
                DROP TABLE authorization_codes;
                DROP TABLE app_codes;
                CREATE TABLE authorization_codes (
                    hash TEXT PRIMARY KEY,
                    client_id TEXT NOT NULL,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    redirect_uri TEXT NOT NULL,
                    code_challenge TEXT,
                    scope TEXT NOT NULL,
                    nonce TEXT,
                    auth_time BIGINT NOT NULL,
                    signed_in_with TEXT NOT NULL,
                    browser_session TEXT,
                    link_identity TEXT,
                    link_session TEXT,
                    expires_at BIGINT NOT NULL,
                    used_at BIGINT,
                    session_id TEXT
                );
                CREATE INDEX authorization_codes_expiry ON authorization_codes(expires_at);
                """
        ),
        Migration(
            version: 18,
            name: "resources (RFC 8707): the APIs broker issues tokens for; the resource a code was granted for",
            sqlite: """
                CREATE TABLE resources (
                    url TEXT PRIMARY KEY NOT NULL,
                    scopes TEXT NOT NULL,
                    created_at INTEGER NOT NULL
                );
                ALTER TABLE authorization_codes ADD COLUMN resource TEXT;
                """,
            postgres: """
                CREATE TABLE resources (
                    url TEXT PRIMARY KEY,
                    scopes TEXT NOT NULL,
                    created_at BIGINT NOT NULL
                );
                ALTER TABLE authorization_codes ADD COLUMN resource TEXT;
                """
        ),
        Migration(
            version: 19,
            name: "bearer-only resources; apps that registered themselves (RFC 7591) and initial access tokens",
            sqlite: """
                ALTER TABLE resources ADD COLUMN bearer INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE apps ADD COLUMN registration_mode TEXT;
                ALTER TABLE apps ADD COLUMN client_name TEXT;
                CREATE TABLE registration_tokens (
                    hash TEXT PRIMARY KEY NOT NULL,
                    created_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL,
                    used_at INTEGER
                );
                """,
            postgres: """
                ALTER TABLE resources ADD COLUMN bearer BIGINT NOT NULL DEFAULT 0;
                ALTER TABLE apps ADD COLUMN registration_mode TEXT;
                ALTER TABLE apps ADD COLUMN client_name TEXT;
                CREATE TABLE registration_tokens (
                    hash TEXT PRIMARY KEY,
                    created_at BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    used_at BIGINT
                );
                """
        ),
        Migration(
            version: 20,
            name: "the claims request (OpenID Connect Core 5.5) of a code and of the session it starts",
            sqlite: """
                ALTER TABLE authorization_codes ADD COLUMN claims TEXT;
                ALTER TABLE sessions ADD COLUMN claims TEXT;
                """,
            postgres: """
                ALTER TABLE authorization_codes ADD COLUMN claims TEXT;
                ALTER TABLE sessions ADD COLUMN claims TEXT;
                """
        ),
        Migration(
            version: 21,
            name: "apps that authenticate with private_key_jwt (RFC 7523): their keys, or where to fetch them",
            sqlite: """
                ALTER TABLE apps ADD COLUMN jwks TEXT;
                ALTER TABLE apps ADD COLUMN jwks_uri TEXT;
                """,
            postgres: """
                ALTER TABLE apps ADD COLUMN jwks TEXT;
                ALTER TABLE apps ADD COLUMN jwks_uri TEXT;
                """
        ),
        Migration(
            version: 22,
            name:
                "a user's profile: the standard claims its provider gives (given_name, picture, …) and when they changed",
            sqlite: """
                ALTER TABLE users ADD COLUMN profile TEXT;
                ALTER TABLE users ADD COLUMN profile_updated_at INTEGER;
                """,
            postgres: """
                ALTER TABLE users ADD COLUMN profile TEXT;
                ALTER TABLE users ADD COLUMN profile_updated_at BIGINT;
                """
        ),
        Migration(
            version: 23,
            name: "apps given pairwise subjects (OpenID Connect Core 8.1): the sector their subjects are made for",
            sqlite: "ALTER TABLE apps ADD COLUMN pairwise_sector TEXT;",
            postgres: "ALTER TABLE apps ADD COLUMN pairwise_sector TEXT;"
        ),
        Migration(
            version: 24,
            name: "apps whose userinfo answers are signed JWTs (OpenID Connect Core 5.3.2)",
            sqlite: "ALTER TABLE apps ADD COLUMN userinfo_alg TEXT;",
            postgres: "ALTER TABLE apps ADD COLUMN userinfo_alg TEXT;"
        ),
        Migration(
            version: 25,
            name:
                "second factors: a user's TOTP key (sealed) and last accepted step, single-use recovery codes, apps that require two",
            sqlite: """
                CREATE TABLE totp_factors (
                    user_id TEXT PRIMARY KEY NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    sealed_key TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    last_step INTEGER NOT NULL
                );
                CREATE TABLE recovery_codes (
                    hash TEXT PRIMARY KEY NOT NULL,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    created_at INTEGER NOT NULL,
                    used_at INTEGER
                );
                CREATE INDEX recovery_codes_user ON recovery_codes(user_id);
                ALTER TABLE apps ADD COLUMN require_mfa INTEGER NOT NULL DEFAULT 0;
                """,
            postgres: """
                CREATE TABLE totp_factors (
                    user_id TEXT PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
                    sealed_key TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    last_step BIGINT NOT NULL
                );
                CREATE TABLE recovery_codes (
                    hash TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    created_at BIGINT NOT NULL,
                    used_at BIGINT
                );
                CREATE INDEX recovery_codes_user ON recovery_codes(user_id);
                ALTER TABLE apps ADD COLUMN require_mfa BIGINT NOT NULL DEFAULT 0;
                """
        ),
    ]

    /// The refusal for a database that a newer broker migrated.
    package static func newerThanBinary(_ versions: [Int]) -> StoreError {
        .unavailable(
            "the database has schema version \(versions.max() ?? 0), newer than this broker's \(current); "
                + "run the broker version that migrated it (or newer)")
    }
}

extension Schema {
    /// A column's kind, for copying rows between stores.
    package enum Kind: Sendable { case text, integer }

    /// A table as `broker db copy` sees it.
    package struct Table: Sendable {
        package let name: String
        package let columns: [(name: String, kind: Kind)]

        package var columnList: String { columns.map(\.name).joined(separator: ", ") }
    }

    /// Every table that holds lasting state, parents before children (the throttle's counters and mail links
    /// are not copied: they lapse within minutes).
    package static let tables: [Table] = [
        Table(
            name: "users",
            columns: [
                ("id", .text), ("provider", .text), ("subject", .text), ("email", .text), ("name", .text),
                ("created_at", .integer), ("disabled_at", .integer), ("profile", .text),
                ("profile_updated_at", .integer),
            ]),
        Table(name: "passkey_users", columns: [("user_id", .text), ("handle", .text)]),
        Table(
            name: "passkeys",
            columns: [
                ("id", .text), ("user_id", .text), ("public_key", .text), ("algorithm", .integer),
                ("sign_count", .integer), ("transports", .text), ("backup_eligible", .integer), ("backed_up", .integer),
                ("aaguid", .text), ("name", .text), ("created_at", .integer), ("last_used_at", .integer),
            ]),
        Table(
            name: "password_accounts",
            columns: [
                ("email", .text), ("user_id", .text), ("password_hash", .text), ("updated_at", .integer),
                ("email_verified_at", .integer),
            ]),
        Table(
            name: "identities",
            columns: [
                ("provider", .text), ("subject", .text), ("user_id", .text), ("email", .text), ("name", .text),
                ("linked_at", .integer),
            ]),
        Table(
            name: "totp_factors",
            columns: [("user_id", .text), ("sealed_key", .text), ("created_at", .integer), ("last_step", .integer)]),
        Table(
            name: "recovery_codes",
            columns: [("hash", .text), ("user_id", .text), ("created_at", .integer), ("used_at", .integer)]),
        Table(
            name: "recovery_addresses", columns: [("user_id", .text), ("email", .text), ("verified_at", .integer)]),
        Table(
            name: "sessions",
            columns: [
                ("id", .text), ("user_id", .text), ("client_id", .text), ("scope", .text), ("created_at", .integer),
                ("revoked_at", .integer), ("signed_in_with", .text), ("dpop_jkt", .text), ("claims", .text),
            ]),
        Table(
            name: "refresh_tokens",
            columns: [
                ("hash", .text), ("session_id", .text), ("created_at", .integer), ("expires_at", .integer),
                ("used_at", .integer),
            ]),
        Table(
            name: "clients",
            columns: [
                ("name", .text), ("secret_hash", .text), ("scopes", .text), ("trust_issuer", .text),
                ("trust_subject", .text), ("trust_audience", .text), ("trust_max_age", .integer),
                ("created_at", .integer),
            ]),
        Table(
            name: "apps",
            columns: [
                ("client_id", .text), ("secret_hash", .text), ("redirect_uris", .text),
                ("post_logout_redirect_uris", .text), ("backchannel_logout_uri", .text), ("first_party", .integer),
                ("id_token_alg", .text), ("scopes", .text), ("created_at", .integer), ("require_par", .integer),
                ("registration_mode", .text), ("client_name", .text), ("jwks", .text), ("jwks_uri", .text),
                ("pairwise_sector", .text), ("userinfo_alg", .text), ("require_mfa", .integer),
            ]),
        Table(
            name: "consents",
            columns: [("user_id", .text), ("client_id", .text), ("scopes", .text), ("granted_at", .integer)]),
        Table(
            name: "browser_sessions",
            columns: [
                ("id", .text), ("cookie_hash", .text), ("user_id", .text), ("signed_in_with", .text),
                ("auth_time", .integer), ("expires_at", .integer), ("revoked_at", .integer),
            ]),
        Table(
            name: "app_signins",
            columns: [
                ("browser_session", .text), ("session_id", .text), ("client_id", .text), ("created_at", .integer),
            ]
        ),
        Table(
            name: "logout_deliveries",
            columns: [
                ("id", .text), ("client_id", .text), ("subject", .text), ("sid", .text), ("attempts", .integer),
                ("created_at", .integer), ("next_attempt_at", .integer), ("give_up_at", .integer),
            ]),
        Table(name: "exchanged_tokens", columns: [("issuer", .text), ("jti", .text), ("expires_at", .integer)]),
        Table(
            name: "authorization_codes",
            columns: [
                ("hash", .text), ("client_id", .text), ("user_id", .text), ("redirect_uri", .text),
                ("code_challenge", .text), ("scope", .text), ("nonce", .text), ("auth_time", .integer),
                ("signed_in_with", .text), ("browser_session", .text), ("link_identity", .text),
                ("link_session", .text), ("expires_at", .integer), ("used_at", .integer), ("session_id", .text),
                ("resource", .text), ("claims", .text),
            ]),
        Table(
            name: "resources",
            columns: [("url", .text), ("scopes", .text), ("created_at", .integer), ("bearer", .integer)]),
        Table(
            name: "registration_tokens",
            columns: [("hash", .text), ("created_at", .integer), ("expires_at", .integer), ("used_at", .integer)]),
        Table(name: "state_markers", columns: [("marker", .text), ("expires_at", .integer)]),
        Table(
            name: "signing_keys",
            columns: [
                ("kid", .text), ("algorithm", .text), ("sealed_key", .text), ("created_at", .integer),
                ("retired_at", .integer),
            ]),
        Table(name: "secret_keys", columns: [("name", .text), ("sealed_key", .text), ("created_at", .integer)]),
    ]
}

/// One value of a copied row.
package enum StoreValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case text(String)
}

/// What `broker db copy` needs of a store: every row of a table out, and a whole copy in.
package protocol CopyableStore: Sendable {
    /// Every row of `table`, its columns in the table's order.
    func exportRows(_ table: Schema.Table) async throws -> [[StoreValue]]

    /// Inserts every table's rows in one transaction (all or nothing).
    func importRows(_ tables: [(Schema.Table, [[StoreValue]])]) async throws

    /// How many rows `table` holds.
    func count(_ table: Schema.Table) async throws -> Int
}
