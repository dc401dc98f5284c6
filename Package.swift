// swift-tools-version:6.2
import PackageDescription

/// Settings every target of ours shares (STYLE.md 16).
let swiftSettings: [SwiftSetting] = [
    // Our targets build without a warning, and stay so: a warning is an error (dependencies are not affected).
    .treatAllWarnings(as: .error),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

/// A libFuzzer build (scripts/fuzz.sh sets BROKER_FUZZ=1): the harnesses are declared.
let fuzzing = Context.environment["BROKER_FUZZ"] == "1"

/// Products of our dependencies that several targets use, named once.
let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")
let nioCore: Target.Dependency = .product(name: "NIOCore", package: "swift-nio")
let hummingbird: Target.Dependency = .product(name: "Hummingbird", package: "hummingbird")
let httpTypes: Target.Dependency = .product(name: "HTTPTypes", package: "swift-http-types")

/// The sign-in providers, in the order people see them: the one place a provider is named. Each is one folder under
/// Providers/ holding three targets: its schema (`<Name>Schema`, in Schema/: the keys its configuration section
/// accepts, their defaults and checks — no HTTP stack, no cryptography, so the configuration loader and its fuzz
/// harness link neither libcurl nor OpenSSL), its module (the rest of the folder), built on what it names here,
/// and its emulator for `broker emulate` (`<Name>Emulator`, in Emulator/). The three catalogs (Providers/Catalog)
/// are generated from this list (the ProviderCatalog plugin); a test lists the folders against them.
let providers: [(name: String, builtOn: [Target.Dependency])] = [
    ("Google", ["OpenIDConnect"]),
    ("Facebook", ["BrokerCrypto", "BrokerHTTPTypes"]),
    ("MicrosoftAccount", ["OpenIDConnect"]),
    ("Twitter", ["BrokerCrypto", "BrokerHTTPTypes"]),
    ("GitHub", ["BrokerCrypto", "BrokerHTTPTypes"]),
    ("Apple", ["OpenIDConnect", "BrokerCrypto", "BrokerHTTPTypes"]),
    // Not one provider but a type of them: any id in `providers` with `"type": "oidc"` (ProviderSchema.typed).
    ("OIDC", ["OpenIDConnect", "BrokerCrypto"]),
]
let providerModules = providers.map { Target.Dependency(stringLiteral: $0.name) }
let providerSchemas = providers.map { Target.Dependency(stringLiteral: $0.name + "Schema") }
let providerEmulators = providers.map { Target.Dependency(stringLiteral: $0.name + "Emulator") }
let providerTargets: [Target] = providers.flatMap { provider in
    [
        .target(
            name: provider.name + "Schema",
            dependencies: ["BrokerCore", "ProviderSchemaSupport"],
            path: "Providers/\(provider.name)/Schema",
            swiftSettings: swiftSettings
        ),
        .target(
            name: provider.name,
            dependencies: ["BrokerCore", "ProviderSupport", .init(stringLiteral: provider.name + "Schema")]
                + provider.builtOn,
            path: "Providers/\(provider.name)",
            exclude: ["Schema", "Emulator", "production.json"],
            swiftSettings: swiftSettings
        ),
        .target(
            name: provider.name + "Emulator",
            dependencies: [
                "BrokerCore", "BrokerCrypto", "ProviderEmulators", .init(stringLiteral: provider.name), hummingbird,
                httpTypes,
            ],
            path: "Providers/\(provider.name)/Emulator",
            swiftSettings: swiftSettings
        ),
    ]
}

let package = Package(
    name: "broker",
    products: [
        // `broker` answers a warm `broker token` itself and execs `broker-full` (installed beside it) for
        // everything else; see Sources/broker/main.swift.
        .executable(name: "broker", targets: ["broker"]),
        .executable(name: "broker-full", targets: ["broker-full"]),
    ],
    traits: [
        // PostgreSQL brings postgres-nio and with it two copies of BoringSSL (swift-nio-ssl's and swift-crypto's)
        // to compile: most of a first build. On by default — `swift build`, scripts/install.sh and the tests have
        // it — and left out by the quick start (`--disable-default-traits`), which runs on SQLite (issue 35).
        .trait(name: "PostgreSQL", description: "broker serve and broker db on PostgreSQL (postgres://…)"),
        .default(enabledTraits: ["PostgreSQL"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.3.0"),
        .package(url: "https://github.com/apple/swift-atomics", from: "1.2.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.34.1"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.20.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.27.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    targets: [
        // C libraries: system-library shims, each reached through one target of ours only: OpenSSL through
        // BrokerCrypto, libcurl through BrokerHTTP, libqrencode through BrokerQR.
        .systemLibrary(
            name: "CCurl",
            path: "Sources/CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // Debian's libqrencode: the QR codes `broker login --device` and `broker mfa totp add` draw on a terminal,
        // and the account page's (an SVG).
        .systemLibrary(
            name: "CQREncode",
            path: "Sources/CQREncode",
            pkgConfig: "libqrencode",
            providers: [.apt(["libqrencode-dev"])]
        ),
        .systemLibrary(
            name: "COpenSSL",
            path: "Sources/COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),

        // Pure domain types; imports nothing of ours and no C.
        .target(name: "BrokerCore", swiftSettings: swiftSettings),
        .target(name: "BrokerCrypto", dependencies: ["COpenSSL", "BrokerCore"], swiftSettings: swiftSettings),
        // glibc's closefrom and chdir spawn actions, which Swift's Glibc module does not show.
        .target(name: "CSpawn", path: "Sources/CSpawn"),
        // POSIX files: private directories, atomic writes, flock; child processes.
        .target(name: "BrokerSystem", dependencies: ["CSpawn"], swiftSettings: swiftSettings),
        // HTTP request and response values and the HTTPTransport protocol: a leaf, so that provider modules and
        // whatever checks their configuration see them without linking libcurl.
        .target(name: "BrokerHTTPTypes", dependencies: ["BrokerCore"], swiftSettings: swiftSettings),
        // libcurl's client and SMTP (re-exports BrokerHTTPTypes).
        .target(
            name: "BrokerHTTP", dependencies: ["CCurl", "BrokerCore", "BrokerHTTPTypes", "BrokerSystem"],
            swiftSettings: swiftSettings),
        // The client's settings and its credential store: no Foundation, no libcurl, so that the launcher
        // can read a cached token with the very code the full CLI uses.
        .target(
            name: "BrokerCredentials",
            dependencies: ["BrokerCore", "BrokerSystem"],
            swiftSettings: swiftSettings
        ),
        // The desktop keyring: a small D-Bus client of our own (Unix socket, SASL EXTERNAL, the message format)
        // and the freedesktop Secret Service over it — no libdbus, no GLib (issue "Keyring").
        .target(name: "BrokerKeyring", swiftSettings: swiftSettings),
        // QR codes (libqrencode): the modules, and an SVG of them.
        .target(name: "BrokerQR", dependencies: ["CQREncode"], swiftSettings: swiftSettings),
        // The CLI's side: the broker API client and single-flight refresh (re-exports BrokerCredentials).
        .target(
            name: "BrokerClient",
            dependencies: [
                "BrokerCore", "BrokerCredentials", "BrokerCrypto", "BrokerHTTP", "BrokerKeyring", "BrokerQR",
                "BrokerSystem",
            ],
            swiftSettings: swiftSettings
        ),

        // The Store protocol, its SQLite (GRDB) and PostgreSQL (PostgresNIO) implementations, and the schema
        // both share.
        .target(
            name: "BrokerStore",
            dependencies: [
                "BrokerCore", "BrokerSystem",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                logging,
            ],
            swiftSettings: swiftSettings
        ),
        // The store on PostgreSQL (several brokers on one database): a target of its own, so that a build
        // without the PostgreSQL trait (the quick start) compiles neither postgres-nio nor BoringSSL.
        .target(
            name: "BrokerPostgres",
            dependencies: [
                "BrokerCore", "BrokerStore", "BrokerSystem",
                logging,
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // `broker serve`'s settings (file, environment, validation): apart from the server so that the config
        // loader builds, and is fuzzed (Fuzz/config), without the HTTP and database stacks.
        .target(
            name: "BrokerConfiguration",
            dependencies: ["BrokerCore", "BrokerSystem", "ProviderSchemaSupport"],
            swiftSettings: swiftSettings
        ),
        // Opening the store a configuration names, where both stores are visible (SQLite always, PostgreSQL with
        // the trait).
        .target(
            name: "BrokerStores",
            dependencies: [
                "BrokerConfiguration", "BrokerCore", "BrokerStore", "BrokerSystem",
                .target(name: "BrokerPostgres", condition: .when(traits: ["PostgreSQL"])),
                logging,
            ],
            swiftSettings: swiftSettings
        ),
        // Sign-in provider modules (Providers/, `providers` above), one protocol (BrokerCore.IdentityProvider).
        // ProviderSchemaSupport holds what schemas share (ProviderSchema, ProviderSection, the endpoint rule);
        // ProviderSupport what modules share (descriptors: a schema and a factory, OAuth 2.0 plumbing, the
        // discovery + JWKS cache); OpenIDConnect the family Google and Microsoft are built on.
        .target(
            name: "ProviderSchemaSupport",
            dependencies: ["BrokerCore"],
            path: "Providers/ProviderSchemaSupport",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ProviderSupport",
            dependencies: [
                "BrokerCore", "BrokerCrypto", "BrokerHTTPTypes", "ProviderSchemaSupport",
                logging,
            ],
            path: "Providers/ProviderSupport",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "OpenIDConnect",
            dependencies: ["BrokerCore", "BrokerCrypto", "BrokerHTTPTypes", "ProviderSupport"],
            path: "Providers/OpenIDConnect",
            swiftSettings: swiftSettings
        ),
        // The catalogs: the providers this build offers, their schemas, their emulators, each list generated
        // from the target's dependencies (`providers` above) by the ProviderCatalog plugin.
        .target(
            name: "BrokerProviders",
            dependencies: providerModules + ["ProviderSupport"],
            path: "Providers/Catalog",
            exclude: ["Schemas", "Emulators"],
            swiftSettings: swiftSettings,
            plugins: ["ProviderCatalog"]
        ),
        .target(
            name: "BrokerProviderSchemas",
            dependencies: providerSchemas + ["ProviderSchemaSupport"],
            path: "Providers/Catalog/Schemas",
            swiftSettings: swiftSettings,
            plugins: ["ProviderCatalog"]
        ),
        .target(
            name: "BrokerEmulators",
            dependencies: providerEmulators + ["ProviderEmulators"],
            path: "Providers/Catalog/Emulators",
            swiftSettings: swiftSettings,
            plugins: ["ProviderCatalog"]
        ),
        .plugin(name: "ProviderCatalog", capability: .buildTool()),
        // What the provider emulators (`broker emulate`) share: the OpenID Connect and OAuth 2.0 engines each
        // provider's Emulator/ folder configures, the consent page, the one server they all mount on.
        .target(
            name: "ProviderEmulators",
            dependencies: [
                "BrokerCore", "BrokerCrypto",
                hummingbird,
                httpTypes,
                logging,
                nioCore,
            ],
            swiftSettings: swiftSettings
        ),
        // The identity broker: a Hummingbird application.
        .target(
            name: "BrokerServer",
            dependencies: [
                "BrokerConfiguration", "BrokerCore", "BrokerCredentials", "BrokerCrypto", "BrokerHTTP", "BrokerQR",
                "BrokerStore", "BrokerSystem",
                "ProviderSupport",
                hummingbird,
                httpTypes,
                logging,
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                nioCore,
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            // The built-in mail templates, compiled into the binary (Config/mail links here); a deployment
            // overrides them with mail.templates_dir.
            resources: [
                .embedInCode("Mail/Templates/reset.txt"), .embedInCode("Mail/Templates/reset.html"),
                .embedInCode("Mail/Templates/verify.txt"), .embedInCode("Mail/Templates/verify.html"),
                .embedInCode("Mail/Templates/exists.txt"), .embedInCode("Mail/Templates/exists.html"),
                .embedInCode("Mail/Templates/recover.txt"), .embedInCode("Mail/Templates/recover.html"),
                .embedInCode("Mail/Templates/mfa.txt"), .embedInCode("Mail/Templates/mfa.html"),
                .embedInCode("Mail/Templates/mfa-recover.txt"), .embedInCode("Mail/Templates/mfa-recover.html"),
            ],
            swiftSettings: swiftSettings,
            // The common-password list (Accounts/common-passwords.txt) becomes a string constant at build time.
            plugins: ["EmbedText"]
        ),

        // The command people run: a warm `broker token` answered by a fully static executable
        // (no Foundation, no libcurl: a few milliseconds), everything else exec'd into `broker-full`.
        .executableTarget(
            name: "broker",
            dependencies: ["BrokerCore", "BrokerCredentials", "BrokerSystem"],
            swiftSettings: swiftSettings,
            linkerSettings: [.unsafeFlags(["-static-executable"], .when(platforms: [.linux]))]
        ),
        // The whole CLI and server (ArgumentParser commands).
        .executableTarget(
            name: "broker-full",
            dependencies: [
                "BrokerClient", "BrokerConfiguration", "BrokerCore", "BrokerCrypto", "BrokerHTTP", "BrokerProviders",
                "BrokerProviderSchemas",
                "BrokerServer", "BrokerStore", "BrokerSystem", "BrokerEmulators", "ProviderEmulators",
                "ProviderSupport",
                "BrokerStores",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Atomics", package: "swift-atomics"),
                nioCore,
                .product(name: "NIOPosix", package: "swift-nio"),
                logging,
            ],
            swiftSettings: swiftSettings
        ),

        // Test helper: rewrites the credential store in a loop, to be killed at random moments.
        .executableTarget(
            name: "broker-cache-writer",
            dependencies: ["BrokerCredentials", "BrokerCore"],
            path: "Tests/CacheWriter",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "broker-bench",
            dependencies: [
                "BrokerCore", "BrokerCrypto", "BrokerServer", "BrokerStore",
                logging,
            ],
            path: "Benchmarks/Sources/broker-bench",
            swiftSettings: swiftSettings
        ),
        // Hummingbird with nothing of ours, serving one file: the floor under the broker's HTTP path (floor.sh).
        .executableTarget(
            name: "hummingbird-floor",
            dependencies: [
                hummingbird,
                nioCore,
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Benchmarks/Sources/hummingbird-floor",
            swiftSettings: swiftSettings
        ),

        // What every test target shares: the process runner, temporary folders, the repository's paths, a
        // manual clock, a scripted HTTP transport and a software WebAuthn authenticator.
        .target(
            name: "BrokerTesting",
            dependencies: [
                "BrokerCore", "BrokerCrypto", "BrokerHTTP", "BrokerSystem",
                logging,
            ],
            swiftSettings: swiftSettings
        ),

        .testTarget(
            name: "BrokerCryptoTests",
            dependencies: ["BrokerCrypto", "BrokerCore", "BrokerTesting"],
            exclude: ["Fixtures"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerHTTPTests", dependencies: ["BrokerHTTP", "BrokerCore", "BrokerTesting"],
            swiftSettings: swiftSettings),
        // The store contract: every promise of the Store protocol, run against each store.
        .testTarget(
            name: "BrokerStoreTests",
            dependencies: [
                "BrokerPostgres", "BrokerStore", "BrokerStores", "BrokerConfiguration", "BrokerCore", "BrokerCrypto",
                "BrokerTesting",
                .product(name: "GRDB", package: "GRDB.swift"),
                logging,
            ],
            swiftSettings: swiftSettings
        ),
        // What both server suites share: the in-process broker, fixture processes (a broker, the CLI, nginx,
        // Prometheus, an SMTP sink, a CI issuer, the provider emulators, Python scripts) and `eventually`.
        .target(
            name: "BrokerTestSupport",
            dependencies: [
                "BrokerClient", "BrokerConfiguration", "BrokerCore", "BrokerCredentials", "BrokerCrypto", "BrokerHTTP",
                "BrokerProviderSchemas", "BrokerProviders", "BrokerServer", "BrokerStore", "BrokerSystem",
                "BrokerTesting", "Google", "MicrosoftAccount", "OpenIDConnect", "ProviderSupport",
                httpTypes, hummingbird, .product(name: "HummingbirdTesting", package: "hummingbird"), logging, nioCore,
            ],
            path: "Tests/BrokerTestSupport",
            swiftSettings: swiftSettings
        ),
        // The D-Bus client and the Secret Service client, against jeepney and gnome-keyring.
        .testTarget(
            name: "BrokerKeyringTests",
            dependencies: ["BrokerKeyring", "BrokerTestSupport", "BrokerTesting"],
            swiftSettings: swiftSettings
        ),
        // The server in process (Hummingbird's router test client): endpoints, flows, components.
        .testTarget(
            name: "BrokerServerTests",
            dependencies: [
                "BrokerClient", "BrokerConfiguration", "BrokerCore", "BrokerCrypto", "BrokerHTTP", "BrokerHTTPTypes",
                "BrokerPostgres",
                "BrokerProviderSchemas", "BrokerProviders", "BrokerQR", "BrokerServer", "BrokerStore", "BrokerSystem",
                "BrokerTestSupport", "BrokerTesting",
                httpTypes, hummingbird, logging, nioCore,
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
            ],
            swiftSettings: swiftSettings
        ),
        // End to end: broker processes and the CLI binary, signals, files, Python, git, nginx, Chromium. Run
        // by scripts/test.sh on its own, after the in-process suites, so that its processes do not share two
        // cores with the whole parallel suite.
        .testTarget(
            name: "BrokerEndToEndTests",
            dependencies: [
                "BrokerClient", "BrokerConfiguration", "BrokerCore", "BrokerCredentials", "BrokerCrypto", "BrokerHTTP",
                "BrokerPostgres", "BrokerServer", "BrokerStore", "BrokerSystem", "BrokerTestSupport", "BrokerTesting",
                "Google", "OpenIDConnect", "ProviderSupport",
                .product(name: "GRDB", package: "GRDB.swift"), logging,
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ProviderTests",
            dependencies: [
                "AppleEmulator", "GitHubEmulator", "OIDCSchema", "AppleSchema", "GitHubSchema",
                "BrokerCore", "BrokerCrypto", "BrokerHTTP", "BrokerProviderSchemas", "BrokerProviders", "BrokerTesting",
                "OpenIDConnect", "ProviderSchemaSupport", "ProviderSupport", "BrokerEmulators", "ProviderEmulators",
                logging,
            ] + providerModules,
            exclude: ["Fixtures"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerCLITests",
            dependencies: [
                "BrokerClient", "BrokerConfiguration", "BrokerCore", "BrokerCredentials", "BrokerCrypto", "BrokerHTTP",
                "BrokerProviders", "BrokerProviderSchemas",
                "BrokerSystem",
                "BrokerTesting", "ProviderSupport",
            ],
            swiftSettings: swiftSettings
        ),
    ] + providerTargets
)

// Text data compiled into a target as a string constant (the common-password list): the data stays a text file in
// the repository, the binary still carries it. A plugin without a tool of its own (its command is /bin/sh).
package.targets += [.plugin(name: "EmbedText", capability: .buildTool())]

// libFuzzer harnesses (Fuzz/, run by scripts/fuzz.sh), declared only when BROKER_FUZZ=1: they have no `main`
// of their own (libFuzzer's is linked in), so they build only with `-sanitize=fuzzer`, in their own scratch
// folder.
if fuzzing {
    package.targets.append(
        .target(name: "FuzzSupport", dependencies: ["BrokerSystem"], path: "Fuzz/Support", swiftSettings: swiftSettings)
    )
    let harnesses: [(name: String, dependencies: [Target.Dependency])] = [
        ("json", ["BrokerCore"]),
        ("form", ["BrokerCore"]),
        ("jwt", ["BrokerCore", "BrokerCrypto"]),
        ("jwk", ["BrokerCore", "BrokerCrypto"]),
        ("phc", ["BrokerCore", "BrokerCrypto"]),
        ("oauth1", ["BrokerCore", "ProviderSupport", "Twitter"]),
        ("loopback", ["BrokerClient"]),
        ("config", ["BrokerConfiguration", "BrokerCore", "BrokerCredentials", "BrokerProviderSchemas"]),
        ("cache", ["BrokerCore", "BrokerCredentials"]),
        ("webauthn", ["BrokerCore", "BrokerCrypto"]),
        ("dbus", ["BrokerKeyring"]),
    ]
    for harness in harnesses {
        package.targets.append(
            .executableTarget(
                name: "fuzz-\(harness.name)",
                dependencies: harness.dependencies + ["FuzzSupport"],
                path: "Fuzz/\(harness.name)",
                swiftSettings: swiftSettings
            )
        )
    }
}
