// swift-tools-version:6.0
import PackageDescription

/// Settings every target of ours shares (STYLE.md 16).
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "broker",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "broker", targets: ["broker"])
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0")
    ],
    targets: [
        // C libraries: system-library shims, reached only through BrokerCrypto / BrokerHTTP.
        .systemLibrary(
            name: "CCurl",
            path: "Sources/CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
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
        .target(name: "BrokerHTTP", dependencies: ["CCurl", "BrokerCore"], swiftSettings: swiftSettings),

        .executableTarget(
            name: "broker",
            dependencies: [
                "BrokerCore", "BrokerCrypto", "BrokerHTTP",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),

        .executableTarget(
            name: "broker-bench",
            dependencies: ["BrokerCrypto"],
            path: "Benchmarks/Sources/broker-bench",
            swiftSettings: swiftSettings
        ),

        .testTarget(
            name: "BrokerCryptoTests",
            dependencies: ["BrokerCrypto", "BrokerCore"],
            exclude: ["Fixtures"],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "BrokerHTTPTests", dependencies: ["BrokerHTTP"], swiftSettings: swiftSettings),
        .testTarget(
            name: "BrokerCLITests",
            dependencies: ["BrokerCrypto"],
            swiftSettings: swiftSettings
        ),
    ]
)
