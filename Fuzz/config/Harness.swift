import BrokerConfiguration
import BrokerCore
import BrokerCredentials
import BrokerProviders
import FuzzSupport

/// The config loaders: `broker serve --config` (odd first byte) and the CLI's `config.json` (even).
/// Properties: a server config that loads passes its own validation again and names only known providers; a
/// client config that loads has only a URL and the http opt-in, and reading the same bytes twice agrees.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfig(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let (mode, rest) = selector(fuzzInput(data, size))
    if mode & 1 == 1 {
        guard
            let configuration = try? ServerConfiguration.load(
                catalog: BrokerProviders.all, file: (rest, "fuzz.json"), environment: [:])
        else { return 0 }
        require((try? configuration.validate(source: "again")) != nil, "a loaded configuration does not validate")
        return 0
    }
    guard let file = try? ClientSettings.configFile(bytes: rest, path: "config.json") else { return 0 }
    require((try? ClientSettings.configFile(bytes: rest, path: "config.json")) == file, "two readings differ")
    return 0
}
