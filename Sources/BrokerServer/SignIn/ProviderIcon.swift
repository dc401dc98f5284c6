package import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerSystem

/// A provider's icon on the sign-in pages (`icon_file` of a provider of a type): a PNG, JPEG, WebP or SVG file
/// of at most 64 KiB, read once at start and put in the pages as a `data:` URL — so that the pages load nothing
/// from anywhere (their policy allows `data:` images and nothing else) and no third party learns who opens
/// them. An SVG shown through `<img>` runs no script.
package enum ProviderIcon {
    package static let maximumSize = 64 * 1024

    /// The `data:` URL of the icon file at `path`, or why it cannot be one.
    package static func dataURL(path: String) throws(ConfigurationError) -> String {
        let bytes: [UInt8]
        do {
            bytes = try PosixFile.read(path: PosixFile.expandingTilde(path), maxSize: maximumSize)
        } catch {
            throw ConfigurationError(source: path, key: nil, problem: "cannot read the icon: \(error.reason)")
        }
        guard let type = mediaType(bytes) else {
            throw ConfigurationError(
                source: path, key: nil, problem: "the icon must be a PNG, JPEG, WebP or SVG image")
        }
        return "data:\(type);base64," + Base64URL.encodeStandard(bytes)
    }

    /// The image type of `bytes` by their first bytes (never by the file's name).
    package static func mediaType(_ bytes: [UInt8]) -> String? {
        if bytes.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "image/png" }
        if bytes.starts(with: [0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if bytes.count > 12, bytes.starts(with: Array("RIFF".utf8)), Array(bytes[8..<12]) == Array("WEBP".utf8) {
            return "image/webp"
        }
        let head = String(decoding: bytes.prefix(1024), as: UTF8.self).lowercased()
        let trimmed = head.drop { $0.isWhitespace || $0 == "\u{FEFF}" }
        if trimmed.hasPrefix("<svg") || (trimmed.hasPrefix("<?xml") && head.contains("<svg")) { return "image/svg+xml" }
        return nil
    }

    /// The icons of the configuration's providers that name one.
    static func load(_ configuration: ServerConfiguration) throws(ConfigurationError) -> [ProviderID: String] {
        var icons: [ProviderID: String] = [:]
        for id in configuration.enabledProviders {
            guard let path = configuration.providers[id]?["icon_file"]?.stringValue else { continue }
            do throws(ConfigurationError) {
                icons[id] = try dataURL(path: path)
            } catch {
                throw ConfigurationError(source: "providers.\(id).icon_file", key: nil, problem: error.problem)
            }
        }
        return icons
    }

    /// The `<img>` before a provider's name on a button, or nothing.
    package static func tag(_ url: String?) -> String {
        guard let url else { return "" }
        return "<img src=\"\(HTML.escape(url))\" alt=\"\" width=\"18\" height=\"18\" class=\"icon\">"
    }
}
