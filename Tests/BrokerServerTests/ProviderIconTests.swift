import BrokerConfiguration
import BrokerCore
import BrokerServer
import BrokerSystem
import BrokerTesting
import Foundation
import Testing

/// A provider's icon (`icon_file`): recognised by its bytes, put in the sign-in pages as a `data:` URL that the
/// pages' policy allows (and nothing else from anywhere), escaped; anything that is not an image refused.
@Suite("provider icons on the sign-in pages")
struct ProviderIconTests {
    static func file(_ bytes: [UInt8]) throws -> String {
        let directory = try TemporaryDirectory.make(prefix: "icon")
        let path = directory.appendingPathComponent("icon").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func imagesAreRecognisedByTheirBytes() throws {
        #expect(ProviderIcon.mediaType([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0]) == "image/png")
        #expect(ProviderIcon.mediaType([0xFF, 0xD8, 0xFF, 0xE0]) == "image/jpeg")
        #expect(ProviderIcon.mediaType(Array("RIFF\u{0}\u{0}\u{0}\u{0}WEBPVP8 ".utf8)) == "image/webp")
        #expect(ProviderIcon.mediaType(Array("  <svg xmlns=\"http://www.w3.org/2000/svg\"/>".utf8)) == "image/svg+xml")
        #expect(ProviderIcon.mediaType(Array("<?xml version=\"1.0\"?>\n<svg/>".utf8)) == "image/svg+xml")
        for text in ["<html><script>alert(1)</script></html>", "GIF89a", "", "{\"svg\": 1}"] {
            #expect(ProviderIcon.mediaType(Array(text.utf8)) == nil, "\(text)")
        }
    }

    @Test func theEmulatedIconBecomesAnImageOnTheSignInPage() throws {
        let path = TestPaths.repositoryRoot.appendingPathComponent("Config/emulated-corp-icon.svg").path
        let url = try ProviderIcon.dataURL(path: path)
        #expect(url.hasPrefix("data:image/svg+xml;base64,"))
        let page = Page.appSignIn(
            app: "web", request: "r", csrf: "c", providers: [("corp", "Example Corp"), ("github", "GitHub")],
            password: false, email: nil, problem: nil, icons: ["corp": url])
        #expect(
            page.contains(
                "<img src=\"\(url)\" alt=\"\" width=\"18\" height=\"18\" class=\"icon\">Sign in with Example Corp"))
        #expect(page.components(separatedBy: "<img").count == 2, "only the provider with an icon has one")
        let policy = Page.headers.first { $0.0 == "Content-Security-Policy" }?.1 ?? ""
        #expect(policy.contains("img-src data:") && policy.contains("default-src 'none'"), "\(policy)")
        // A data URL is escaped as any attribute is.
        #expect(
            ProviderIcon.tag("data:x\"><script>")
                == "<img src=\"data:x&quot;&gt;&lt;script&gt;\" alt=\"\" width=\"18\" height=\"18\" class=\"icon\">")
    }

    @Test func whatIsNotAnIconIsRefusedAtStart() throws {
        let html = try Self.file(Array("<html><body>hi</body></html>".utf8))
        let big = try Self.file(
            [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + [UInt8](repeating: 0, count: 70_000))
        for (path, says) in [
            (html, "PNG, JPEG, WebP or SVG"), (big, "cannot read"), ("/nonexistent.png", "cannot read"),
        ] {
            #expect {
                try ProviderIcon.dataURL(path: path)
            } throws: { error in
                (error as? ConfigurationError)?.problem.contains(says) == true
            }
        }
    }
}
