/// The freedesktop Secret Service (`org.freedesktop.secrets`: gnome-keyring, KeePassXC, KWallet's bridge) over
/// ``DBusConnection``: a `plain` session (the secret crosses the per-user bus, which only this user can reach —
/// as gh and go-keyring do), the default collection through `ReadAlias("default")`, items found by their
/// attributes. Every call ends by the deadline given when the service was opened.
package final class SecretService: Sendable {
    static let bus = "org.freedesktop.secrets"
    static let servicePath = "/org/freedesktop/secrets"
    static let serviceInterface = "org.freedesktop.Secret.Service"
    static let collectionInterface = "org.freedesktop.Secret.Collection"
    static let itemInterface = "org.freedesktop.Secret.Item"
    static let promptInterface = "org.freedesktop.Secret.Prompt"

    let connection: DBusConnection
    /// The deadline of opening: connecting, the session, and (``unlockedDefaultCollection(interactive:)``)
    /// finding the default collection and whether it is locked — the answer a command must have quickly.
    let deadline: ContinuousClock.Instant
    /// Each later call's own limit (reading, writing, deleting items: the keyring is open and unlocked by
    /// then, and a write may make it re-encrypt its file on a busy machine).
    let callBudget: Duration
    /// The `plain` session's object path.
    let session: String

    /// Why the keyring cannot be used, in words a person can act on.
    package enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// No session bus, or no Secret Service on it.
        case unavailable(String)
        /// The default collection is locked (and no prompt was allowed, or the person dismissed it).
        case locked
        /// No default collection (`ReadAlias("default")` is `/`).
        case noDefaultCollection
        /// The service or the bus failed, or did not answer in time.
        case failed(String)

        /// Why, without the words "the keyring" (for a sentence that already names it).
        package var reason: String {
            switch self {
            case .unavailable(let reason): reason
            case .locked: "it is locked"
            case .noDefaultCollection: "it has no default collection"
            case .failed(let reason): "it failed: \(reason)"
            }
        }

        package var description: String {
            switch self {
            case .unavailable(let reason): "no keyring (\(reason))"
            case .locked: "the keyring is locked"
            case .noDefaultCollection: "the keyring has no default collection"
            case .failed(let reason): "the keyring failed (\(reason))"
            }
        }
    }

    /// Connects to the session bus and opens a `plain` session, all by `deadline`.
    package init(
        environment: [String: String], deadline: ContinuousClock.Instant, callBudget: Duration = .seconds(10)
    ) throws(Failure) {
        self.callBudget = callBudget
        guard let address = DBusConnection.sessionBusAddress(environment: environment) else {
            throw .unavailable(DBusError.noSessionBus.description)
        }
        self.deadline = deadline
        do {
            connection = try DBusConnection(address: address, deadline: deadline)
        } catch {
            throw .unavailable(error.description)
        }
        do {
            let opened = try connection.call(
                .call(
                    destination: Self.bus, path: Self.servicePath, interface: Self.serviceInterface,
                    member: "OpenSession", [.string("plain"), .variant(.string(""))]), deadline: deadline)
            guard opened.count == 2, let path = opened[1].stringValue else {
                throw Failure.failed("OpenSession answered \(opened.map(\.signature).joined())")
            }
            session = path
        } catch let error as DBusError {
            if case .remote(let name, _) = error,
                name == "org.freedesktop.DBus.Error.ServiceUnknown"
                    || name == "org.freedesktop.DBus.Error.NameHasNoOwner"
                    || name == "org.freedesktop.DBus.Error.Spawn.ChildExited"
                    || name.hasPrefix("org.freedesktop.DBus.Error.Spawn")
            {
                throw .unavailable("no Secret Service on the session bus: \(error)")
            }
            throw .failed(error.description)
        } catch let failure as Failure {
            throw failure
        } catch {
            throw .failed("\(error)")
        }
    }

    private func call(
        _ path: String, _ interface: String, _ member: String, _ arguments: [DBusValue] = [],
        deadline: ContinuousClock.Instant? = nil
    ) throws(Failure) -> [DBusValue] {
        do {
            return try connection.call(
                .call(destination: Self.bus, path: path, interface: interface, member: member, arguments),
                deadline: deadline ?? .now + callBudget)
        } catch {
            if case .remote(let name, _) = error, name == "org.freedesktop.Secret.Error.IsLocked" { throw .locked }
            throw .failed(error.description)
        }
    }

    /// The default collection's object path.
    package func defaultCollection() throws(Failure) -> String {
        let answer = try call(
            Self.servicePath, Self.serviceInterface, "ReadAlias", [.string("default")], deadline: deadline)
        guard let path = answer.first?.stringValue else { throw .failed("ReadAlias answered nothing") }
        guard path != "/" else { throw .noDefaultCollection }
        return path
    }

    /// Whether `collection` is locked (its `Locked` property).
    package func isLocked(_ collection: String) throws(Failure) -> Bool {
        let answer = try call(
            collection, "org.freedesktop.DBus.Properties", "Get",
            [.string(Self.collectionInterface), .string("Locked")], deadline: deadline)
        guard let locked = answer.first?.unwrapped.boolValue else { throw .failed("Locked is not a boolean") }
        return locked
    }

    /// The default collection, unlocked: `.locked` when it is locked and `interactive` is false — no prompt is
    /// ever started then; with `interactive`, the desktop's unlock prompt is shown and waited for (by the
    /// deadline).
    package func unlockedDefaultCollection(interactive: Bool) throws(Failure) -> String {
        let collection = try defaultCollection()
        guard try isLocked(collection) else { return collection }
        guard interactive else { throw .locked }
        let answer = try call(
            Self.servicePath, Self.serviceInterface, "Unlock", [.objectPaths([collection])], deadline: deadline)
        guard answer.count == 2, let prompt = answer[1].stringValue else { throw .failed("Unlock answered oddly") }
        if answer[0].objectPathArray?.contains(collection) == true { return collection }
        guard prompt != "/" else { throw .locked }
        // The bus itself (not the Secret Service) routes the prompt's `Completed` signal to us.
        do {
            try connection.call(
                .call(
                    destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                    interface: "org.freedesktop.DBus", member: "AddMatch",
                    [
                        .string(
                            "type='signal',interface='\(Self.promptInterface)',member='Completed',path='\(prompt)'")
                    ]), deadline: deadline)
        } catch {
            throw .failed(error.description)
        }
        _ = try call(prompt, Self.promptInterface, "Prompt", [.string("")], deadline: deadline)
        let completed: DBusMessage
        do {
            completed = try connection.waitForSignal(deadline: deadline) {
                $0.path == prompt && $0.member == "Completed"
            }
        } catch {
            throw error == .timedOut("waiting for a signal") ? .locked : .failed(error.description)
        }
        guard completed.body.first?.boolValue == false, try !isLocked(collection) else { throw .locked }
        return collection
    }

    /// The items of `collection` with exactly these attributes.
    package func items(in collection: String, attributes: [(String, String)]) throws(Failure) -> [String] {
        let answer = try call(
            collection, Self.collectionInterface, "SearchItems", [.stringDictionary(attributes)])
        guard let paths = answer.first?.objectPathArray else { throw .failed("SearchItems answered oddly") }
        return paths.sorted()
    }

    /// The secret of `item`.
    package func secret(of item: String) throws(Failure) -> [UInt8] {
        let answer = try call(item, Self.itemInterface, "GetSecret", [.objectPath(session)])
        guard let fields = answer.first?.structureValue, fields.count >= 3, let value = fields[2].byteArray else {
            throw .failed("GetSecret answered oddly")
        }
        return value
    }

    /// Stores `secret` in `collection` under `attributes` (replacing the item that has exactly those).
    package func store(
        _ secret: [UInt8], label: String, attributes: [(String, String)], in collection: String
    ) throws(Failure) {
        let properties = DBusValue.array(
            element: "{sv}",
            [
                .dictEntry(.string(Self.itemInterface + ".Label"), .variant(.string(label))),
                .dictEntry(
                    .string(Self.itemInterface + ".Attributes"), .variant(.stringDictionary(attributes))),
            ])
        let value = DBusValue.structure([
            .objectPath(session), .bytes([]), .bytes(secret), .string("text/plain"),
        ])
        let answer = try call(collection, Self.collectionInterface, "CreateItem", [properties, value, .boolean(true)])
        guard answer.count == 2, answer[0].stringValue != "/" else {
            // A prompt instead of an item: the collection locked itself meanwhile.
            throw .locked
        }
    }

    /// Deletes `item` (no prompt: an item of an unlocked collection is deleted at once).
    package func delete(_ item: String) throws(Failure) {
        let answer = try call(item, Self.itemInterface, "Delete")
        if let prompt = answer.first?.stringValue, prompt != "/" { throw .locked }
    }
}
