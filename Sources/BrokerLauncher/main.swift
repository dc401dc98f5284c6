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

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

if let line = FastToken.answer(CommandLine.arguments) {
    FastToken.write(line + "\n")
    exit(0)
}
Launcher.execFull()

/// Hands the command to `broker-full`.
enum Launcher {
    static let fullName = "broker-full"

    static func execFull() -> Never {
        let path = fullPath()
        execv(path, CommandLine.unsafeArgv)
        let reason = String(cString: strerror(errno))
        FastToken.write("broker: cannot run \(path): \(reason)\n", to: STDERR_FILENO)
        exit(1)
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
            default: return nil
            }
            index += 1
        }
        guard
            let settings = try? ClientSettings(
                broker: broker, profile: profile, environment: ClientSettings.processEnvironment),
            let session = try? settings.cache.peekSession(for: settings.key),
            session.satisfies(minValid: minValid, at: SystemClock().seconds())
        else { return nil }
        let token = session.accessToken.exposed
        return format == "header" ? "Authorization: Bearer \(token)" : token
    }

    static func write(_ text: String, to descriptor: Int32 = STDOUT_FILENO) {
        var bytes = Array(text.utf8)
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
