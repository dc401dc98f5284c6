// `broker`: the command people run. A warm `broker token` is answered here; everything else is handed to
// the full implementation, `broker-full`, installed beside this executable, by `execv` (same process,
// same arguments, terminal, descriptors and signals).
//
// Why two binaries: `broker token` runs before every kubectl call and in shell prompts, and must cost a
// few milliseconds. The full broker links Foundation (through GRDB), libcurl with its dependency chain,
// OpenSSL, SQLite, NIO and ArgumentParser; starting it costs about 25 ms of dynamic loading and runtime
// set-up before `main`. This executable is fully static (`-static-executable`: no dynamic loader at all)
// and holds only the standard library and the credential-store reader that `broker-full` uses too, so the
// answer is the same code's answer.
import BrokerCore
import BrokerCredentials
import BrokerSystem
import Glibc

// Installed as `git-credential-broker` / `docker-credential-broker` (links to this file), it is
// `broker credential git|docker …`.
var arguments = CommandLine.arguments
let calledAs = arguments.first.map { String($0.split(separator: "/").last ?? "") } ?? ""
if let helper = CredentialHelper.Kind.allCases.first(where: { $0.installedName == calledAs }) {
    arguments = ["broker", "credential", helper.rawValue] + arguments.dropFirst()
}
if let line = FastToken.answer(arguments) {
    FastToken.write(line + "\n")
    exit(0)
}
var consumedStdin: [UInt8]?
if let request = FastCredential.request(arguments) {
    let input = FastCredential.readStdin()
    if let answer = FastCredential.answer(request, input: input) {
        FastToken.write(answer)
        exit(0)
    }
    consumedStdin = input
}
Launcher.execFull(arguments, stdin: consumedStdin)

/// Hands the command to `broker-full`.
enum Launcher {
    static let fullName = "broker-full"

    /// Runs `broker-full` with `arguments` in this process. `stdin`: what this process already read from its
    /// standard input, handed on through a pipe so that broker-full reads the same bytes.
    static func execFull(_ arguments: [String], stdin: [UInt8]?) -> Never {
        let path = fullPath()
        if let stdin { replaceStdin(with: stdin) }
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) }
        argv.append(nil)
        execv(path, &argv)
        let reason = String(cString: strerror(errno))
        FastToken.write("broker: cannot run \(path): \(reason)\n", to: STDERR_FILENO)
        exit(1)
    }

    /// Makes `bytes` (at most a pipe's capacity: a credential helper's request) this process's stdin.
    static func replaceStdin(with bytes: [UInt8]) {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else {
            FastToken.write("broker: cannot hand on stdin: \(String(cString: strerror(errno)))\n", to: STDERR_FILENO)
            exit(1)
        }
        FastToken.write(bytes, to: ends[1])
        close(ends[1])
        dup2(ends[0], STDIN_FILENO)
        close(ends[0])
    }

    /// `broker-full` in the directory of this executable (symbolic links resolved, so a link to `broker`
    /// on `PATH` finds its sibling). `BROKER_FULL` overrides it.
    static func fullPath() -> String {
        if let override = getenv("BROKER_FULL"), override.pointee != 0 { return String(cString: override) }
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return fullName }
        let path = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let slash = path.lastIndex(of: "/") else { return fullName }
        return String(path[...slash]) + fullName
    }
}

/// The warm path of `broker token`: the cached session of this broker and profile, when its access token
/// already meets `--min-valid`. Anything else — another command, an option this path does not handle,
/// `--help`, a token that needs a refresh, a store or config file that does not read cleanly — returns
/// `nil`, and `broker-full` does the whole job (and reports any problem). Reading never changes a file.
enum FastToken {
    static func answer(_ arguments: [String]) -> String? {
        guard arguments.count >= 2, arguments[1] == "token" else { return nil }
        var minValid: Int64 = 60
        var format = "raw"
        var broker: String?
        var profile: String?
        var resource: String?
        var index = 2
        while index < arguments.count {
            var name = arguments[index]
            var value: String?
            if let equals = name.firstIndex(of: "="), name.hasPrefix("--") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            } else if index + 1 < arguments.count {
                value = arguments[index + 1]
                index += 1
            }
            guard let value else { return nil }
            switch name {
            case "--min-valid":
                guard let seconds = Int64(value), seconds >= 0 else { return nil }
                minValid = seconds
            case "--format":
                guard value == "raw" || value == "header" else { return nil }
                format = value
            case "--broker": broker = value
            case "--profile": profile = value
            // A URL this path never checks: only a token cached for exactly it is answered, and broker-full
            // judges any other.
            case "--resource": resource = value
            default: return nil
            }
            index += 1
        }
        guard
            let settings = try? ClientSettings(
                broker: broker, profile: profile, environment: ClientSettings.processEnvironment),
            var session = try? settings.cache.peekSession(for: settings.key)
        else { return nil }
        if let resource {
            guard let viewed = session.viewed(forResource: resource) else { return nil }
            session = viewed
        }
        guard session.satisfies(minValid: minValid, at: SystemClock().seconds()) else { return nil }
        let token = session.accessToken.exposed
        return format == "header" ? "Authorization: Bearer \(token)" : token
    }

    static func write(_ text: String, to descriptor: Int32 = STDOUT_FILENO) {
        write(Array(text.utf8), to: descriptor)
    }

    static func write(_ bytes: [UInt8], to descriptor: Int32) {
        var bytes = bytes
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { buffer in
                buffer.baseAddress.map { Glibc.write(descriptor, $0 + offset, buffer.count - offset) } ?? 0
            }
            if written < 0 {
                if errno == EINTR { continue }
                // The reader went away: nothing sensible left to do.
                exit(1)
            }
            offset += written
        }
    }
}

/// The warm path of a credential helper's `get`: the cached token, when the profile lists the URL and the token
/// meets ``CredentialHelper/minValid`` — the same answer `broker credential … get` gives, from the same code.
/// Anything else goes to `broker-full` with the request it read.
enum FastCredential {
    struct Request {
        var kind: CredentialHelper.Kind
        var username = CredentialHelper.defaultUsername
        var broker: String?
        var profile: String?
    }

    static var maxInput: Int { CredentialHelper.maxRequestBytes }

    /// `broker credential git|docker [--username N] [--broker U] [--profile P] get`, else `nil`.
    static func request(_ arguments: [String]) -> Request? {
        guard arguments.count >= 4, arguments[1] == "credential", arguments.last == "get",
            let kind = CredentialHelper.Kind(rawValue: arguments[2])
        else { return nil }
        var request = Request(kind: kind)
        var index = 3
        while index < arguments.count - 1 {
            var name = arguments[index]
            var value: String
            if let equals = name.firstIndex(of: "="), name.hasPrefix("--") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            } else {
                guard index + 1 < arguments.count - 1 else { return nil }
                value = arguments[index + 1]
                index += 1
            }
            switch name {
            case "--username":
                guard !value.isEmpty, !value.contains(where: { $0 == ":" || $0.isNewline || $0 == "\0" }) else {
                    return nil
                }
                request.username = value
            case "--broker": request.broker = value
            case "--profile": request.profile = value
            default: return nil
            }
            index += 1
        }
        return request
    }

    /// stdin, at most ``maxInput`` bytes (more is refused here, as broker-full refuses it).
    static func readStdin() -> [UInt8] {
        // A read error (not seen in practice on a pipe) hands broker-full an empty request, answered as one.
        let bytes = (try? PosixFile.readAll(descriptor: STDIN_FILENO, name: "stdin", limit: maxInput)) ?? []
        if bytes.count > maxInput {
            FastToken.write("broker: the request on stdin is too large\n", to: STDERR_FILENO)
            exit(1)
        }
        return bytes
    }

    static func answer(_ request: Request, input: [UInt8]) -> String? {
        let text = String(decoding: input, as: UTF8.self)
        guard
            let settings = try? ClientSettings(
                broker: request.broker, profile: request.profile, environment: ClientSettings.processEnvironment)
        else { return nil }
        let target: (url: APIURL, hasPath: Bool)?
        switch request.kind {
        case .git: target = CredentialHelper.gitTarget(CredentialHelper.gitFields(text))
        case .docker: target = CredentialHelper.dockerTarget(text)
        }
        guard let target, settings.answersCredentials(for: target.url, hasPath: target.hasPath),
            var session = try? settings.cache.peekSession(for: settings.key)
        else { return nil }
        // The server's own token when its api_urls entry names a resource; a missing or old one is the full
        // CLI's to get.
        if let resource = settings.credentialResource(for: target.url, hasPath: target.hasPath) {
            guard let viewed = session.viewed(forResource: resource) else { return nil }
            session = viewed
        }
        guard session.satisfies(minValid: CredentialHelper.minValid, at: SystemClock().seconds()) else { return nil }
        switch request.kind {
        case .git:
            return CredentialHelper.gitAnswer(session, username: request.username)
        case .docker:
            let serverURL = String(text.prefix { $0 != "\n" && $0 != "\r" })
            return CredentialHelper.dockerAnswer(serverURL: serverURL, session, username: request.username)
        }
    }
}
