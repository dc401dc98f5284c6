import BrokerCrypto
import BrokerTesting
import Testing

@Suite("AES-256-GCM")
struct AESGCMTests {
    static func hex(_ text: String) -> [UInt8] {
        var bytes = [UInt8]()
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            guard let byte = UInt8(text[index..<next], radix: 16) else { preconditionFailure("not hex: \(text)") }
            bytes.append(byte)
            index = next
        }
        return bytes
    }

    /// McGrew & Viega, "The Galois/Counter Mode of Operation", test cases 13 and 14 (AES-256, zero key and IV).
    @Test func knownAnswers() throws {
        let key = [UInt8](repeating: 0, count: 32)
        let nonce = [UInt8](repeating: 0, count: 12)
        let empty = try AESGCM.seal([], key: key, nonce: nonce, associatedData: [])
        #expect(empty == nonce + Self.hex("530f8afbc74536b9a963b4f1c4cb738b"))
        let block = try AESGCM.seal([UInt8](repeating: 0, count: 16), key: key, nonce: nonce, associatedData: [])
        #expect(
            block == nonce + Self.hex("cea7403d4d606b6e074ec5d3baf39d18") + Self.hex("d0d1c8a799996bf0265b98b5d48ab919")
        )
        #expect(AESGCM.open(block, key: key) == [UInt8](repeating: 0, count: 16))
    }

    @Test func anyChangeIsRefused() throws {
        let key = try SecureRandom.bytes(32)
        let message = Array("pending sign-in".utf8)
        let box = try AESGCM.seal(message, key: key, associatedData: Array("google".utf8))
        #expect(AESGCM.open(box, key: key, associatedData: Array("google".utf8)) == message)
        #expect(AESGCM.open(box, key: key, associatedData: Array("facebook".utf8)) == nil, "bound to its context")
        #expect(AESGCM.open(box, key: try SecureRandom.bytes(32), associatedData: Array("google".utf8)) == nil)
        for index in [0, 12, box.count - 1] {
            var tampered = box
            tampered[index] ^= 0x01
            #expect(AESGCM.open(tampered, key: key, associatedData: Array("google".utf8)) == nil, "byte \(index)")
        }
        #expect(AESGCM.open(Array(box.prefix(27)), key: key) == nil, "too short")
        let again = try AESGCM.seal(message, key: key, associatedData: Array("google".utf8))
        #expect(again != box, "a fresh nonce each time")
    }
}
