import BrokerConfiguration
import BrokerCore
import BrokerCredentials
import BrokerProviderSchemas
import FuzzSupport

/// The config loaders: `broker serve --config` (odd first byte), the CLI's `config.json` (first byte 0 mod 4)
/// and the URLs in its `api_urls` (2 mod 4), which decide where a token may go.
/// Properties: a server config that loads passes its own validation again; a client config that loads reads
/// the same twice and lists only URLs a token may safely go to; a URL that parses re-parses to itself from
/// its printed form, covers itself and what lies below it, and never covers a sibling that merely shares a
/// prefix or another origin.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfig(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let (mode, rest) = selector(fuzzInput(data, size))
    if mode & 1 == 1 {
        guard
            let configuration = try? ServerConfiguration.load(
                catalog: BrokerProviderSchemas.all, file: (rest, "fuzz.json"), environment: [:])
        else { return 0 }
        require((try? configuration.validate(source: "again")) != nil, "a loaded configuration does not validate")
        return 0
    }
    if mode & 3 == 2 {
        guard let url = APIURL(String(decoding: rest, as: UTF8.self)) else { return 0 }
        require(APIURL(url.description) == url, "the printed form re-parses to another URL")
        require(url.covers(url), "a URL does not cover itself")
        // Bytes, as a server reads them (a `Character` holding `?` and a combining mark is not `"?"`).
        require(
            !url.path.utf8.contains(UInt8(ascii: "?")) && !url.path.utf8.contains(UInt8(ascii: "#")),
            "a query or fragment in the path")
        if let below = APIURL(url.description + "/below") {
            require(url.covers(below), "the path below is not covered")
        }
        if !url.path.isEmpty, !url.path.hasSuffix("/"), let sibling = APIURL(url.description + "x") {
            require(!url.covers(sibling), "a sibling sharing a prefix is covered")
        }
        if let other = APIURL((url.scheme == "https" ? "http://" : "https://") + url.host + url.path) {
            require(!url.covers(other), "another scheme is covered")
        }
        return 0
    }
    guard let file = try? ClientSettings.configFile(bytes: rest, path: "config.json") else { return 0 }
    require((try? ClientSettings.configFile(bytes: rest, path: "config.json")) == file, "two readings differ")
    let listed = (file.apiURLs ?? []) + file.profiles.values.flatMap { $0.apiURLs ?? [] }
    require(listed.allSatisfy(\.carriesTokensSafely), "a listed URL would carry a token over plain http")
    return 0
}
