import BrokerClient
import Testing

/// What `broker login`'s loopback listener makes of the bytes arriving on its port (the reader `Fuzz/loopback`
/// fuzzes): only a well-formed `GET /callback` is a callback; everything else gets a 4xx and is waited past.
@Suite("Loopback listener: reading a request head")
struct LoopbackRequestTests {
    typealias Head = LoopbackListener.RequestHead

    @Test func aCallbackGivesItsQueryFirstOfEachName() {
        #expect(
            LoopbackListener.examine(Array("GET /callback?code=a%2Fb&state=s&code=x HTTP/1.1\r\nHost: h\r\n\r\n".utf8))
                == .callback(["code": "a/b", "state": "s"]))
        #expect(LoopbackListener.examine(Array("GET /callback HTTP/1.0\r\n\r\n".utf8)) == .callback([:]))
    }

    @Test(arguments: [
        ("GET /callback?code=a", Head.incomplete),
        ("GET /callback?code=a HTTP/1.1\r\n", Head.incomplete),
        ("POST /callback HTTP/1.1\r\n\r\n", Head.refused("405 Method Not Allowed")),
        ("GET /favicon.ico HTTP/1.1\r\n\r\n", Head.refused("404 Not Found")),
        ("GET /callbackx HTTP/1.1\r\n\r\n", Head.refused("404 Not Found")),
        ("GET /callback?code=%zz HTTP/1.1\r\n\r\n", Head.refused("400 Bad Request")),
        ("\r\n\r\n", Head.refused("400 Bad Request")),
        ("GET /callback\r\n\r\n", Head.refused("400 Bad Request")),
        ("GET /callback SSH-2.0\r\n\r\n", Head.refused("400 Bad Request")),
        // Found by Fuzz/loopback: two spaces made an empty field that the split dropped, and the line passed.
        ("GET  /callback HTTP/1.1\r\n\r\n", Head.refused("400 Bad Request")),
        ("GET /callback  HTTP/1.1\r\n\r\n", Head.refused("400 Bad Request")),
    ])
    func malformedAndOtherRequestsAreNotCallbacks(head: String, expected: Head) {
        #expect(LoopbackListener.examine(Array(head.utf8)) == expected)
    }

    @Test func aHeadPastSixteenKibibytesWithoutItsEndIsRefused() {
        let long = Array(("GET /callback?pad=" + String(repeating: "a", count: 16 * 1024) + " HTTP/1.1\r\n").utf8)
        #expect(LoopbackListener.examine(long) == .refused("431 Request Header Fields Too Large"))
        #expect(LoopbackListener.examine(Array(long.prefix(16 * 1024))) == .incomplete)
    }
}
