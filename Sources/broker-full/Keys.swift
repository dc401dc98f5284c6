import ArgumentParser
import BrokerClient
import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import BrokerStores

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension Broker {
    struct Keys: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Manage the broker's signing keys.",
            subcommands: [Rotate.self]
        )

        struct Rotate: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Make a new signing key current.",
                discussion: """
                    The previous key stays in the JWKS until every token it signed has expired; every broker
                    on the store (--database) serves the new key within two seconds. Prints the new key id.
                    The RS256 key of id tokens rotates too: its new key is published at once and signs id tokens
                    after --id-token-key-in seconds (default 3600), so that apps that cache the JWKS have it
                    before they meet it; 0 makes it sign at once (after a compromise).
                    """
            )

            @OptionGroup var store: ServerStoreOptions

            @Option(name: .long, help: "ES256 (default), RS256 or EdDSA.")
            var algorithm: String = "ES256"

            @Option(
                name: .customLong("id-token-key-in"),
                help: ArgumentHelp(
                    "Seconds until the new id-token key signs (published from now; default 3600, 0: at once).",
                    valueName: "SECONDS"))
            var idTokenKeyIn: Int64 = 3600

            func validate() throws {
                guard (0...604_800).contains(idTokenKeyIn) else {
                    throw ValidationError("--id-token-key-in must be between 0 and 604800 seconds (a week)")
                }
            }

            func run() async throws {
                let configuration: ServerConfiguration
                do {
                    configuration = try store.loadConfiguration()
                } catch {
                    throw CommandFailure("config: \(error)")
                }
                if let file = configuration.signingKeyFile {
                    throw CommandFailure(
                        "the signing key comes from \(file) (server.signing_key_file); replace that file instead"
                    )
                }
                let kind: KeyKind
                switch algorithm.uppercased() {
                case "ES256": kind = .ecP256
                case "RS256": kind = .rsa(bits: 3072)
                case "EDDSA": kind = .ed25519
                default: throw CommandFailure("--algorithm must be ES256, RS256 or EdDSA", status: .usage)
                }
                let now = SystemClock().seconds()
                let retention = max(configuration.accessTokenTTL, configuration.mintMaxTTL) + 60
                do {
                    let store = try await StoreOpener.open(configuration, logger: StoreOpener.quietLogger)
                    let master = try await MasterKey.load(
                        configuration: configuration, environment: ProcessInfo.processInfo.environment, store: store)
                    let vault = KeyVault(
                        store: store, master: master,
                        legacyDataDirectory: store.isShared ? nil : configuration.expandedDataDirectory)
                    let ring = try await vault.rotate(kind: kind, now: now, retention: retention)
                    // The id-token key rotates with the ring: published now, signing later; the one it replaces
                    // stays published.
                    let idTokenKeys = try await vault.rotateIDTokenKey(now: now, activateIn: idTokenKeyIn)
                    let idTokenKid = try idTokenKeys.keys[0].thumbprint()
                    await Broker.Client.audit(
                        configuration, store: store, "key_rotated",
                        fields: [
                            "kid": ring.current.kid, "algorithm": ring.current.key.algorithm.rawValue,
                            "id_token_kid": idTokenKid, "via": "cli",
                        ])
                    await store.close()
                    if let previous = ring.retired.first {
                        Console.note(
                            "key \(ring.current.kid) is now current; \(previous.kid) stays published for \(retention) s"
                        )
                    } else {
                        Console.note("key \(ring.current.kid) is now current")
                    }
                    if idTokenKeys.activatesAt == nil {
                        Console.note(
                            "id-token key \(idTokenKid) (RS256) is now current; the previous one stays published")
                    } else {
                        Console.note(
                            "id-token key \(idTokenKid) (RS256) is published now and signs id tokens in "
                                + "\(idTokenKeyIn) s; the current one signs until then and stays published")
                    }
                    Console.out(ring.current.kid)
                } catch {
                    throw CommandFailure("\(error)")
                }
            }
        }
    }
}
