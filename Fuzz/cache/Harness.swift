import BrokerCore
import BrokerCredentials
import FuzzSupport

/// The credential store reader (`~/.config/broker/sessions.json`), which the launcher and every command read.
/// Properties: a store that reads writes back to bytes that read as the same sessions, and writing those again
/// gives the same bytes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCache(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let sessions = try? cache.decode(fuzzInput(data, size)) else { return 0 }
    let written = FileTokenCache.encode(sessions)
    guard let again = try? cache.decode(written) else {
        require(false, "a store written from read sessions does not read")
        return 0
    }
    require(again.count == sessions.count, "sessions lost in a round trip")
    require(FileTokenCache.encode(again) == written, "writing the store is not stable")
    return 0
}

let cache = FileTokenCache(directory: "/nonexistent/broker-fuzz")
