import BrokerCore
import BrokerCrypto
import FuzzSupport

/// PHC scrypt strings as stored in the users table (`$scrypt$ln=…,r=…,p=…$salt$hash`), read back at every
/// login. The limits are lowered (N ≤ 2^10, 1 MiB) so that the parser, not scrypt, gets the executions; the
/// checks are the same code as with the production limits. Properties: nothing crashes, nothing runs past
/// libFuzzer's time and memory limits (a hostile row cannot make a login cost gigabytes), only a `$scrypt$`
/// string can verify, and a string that verifies is not reported as needing no rehash when it is weaker than
/// the current parameters.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPHC(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let stored = String(decoding: fuzzInput(data, size), as: UTF8.self)
    let verified = (try? hasher.verify(Secret("correct horse battery staple"), against: stored)) ?? false
    if verified {
        require(stored.utf8.starts(with: "$scrypt$".utf8), "a non-scrypt string verified")
    }
    _ = hasher.needsRehash(stored)
    return 0
}

let hasher: PasswordHasher = {
    var limits = PasswordHasher.Limits()
    limits.maxLogN = 10
    limits.maxMemoryBytes = 1024 * 1024
    return PasswordHasher(parameters: PasswordHasher.Parameters(logN: 4, r: 8, p: 1), limits: limits)
}()
