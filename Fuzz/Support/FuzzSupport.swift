import BrokerSystem
import Glibc

/// The input libFuzzer hands a harness, copied into an array.
package func fuzzInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    guard let data, size > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: size))
}

/// Stops the run when a property of the code under test does not hold; libFuzzer saves the input that broke
/// it as a `crash-…` file.
package func require(
    _ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID,
    line: UInt = #line
) {
    if !condition() { fatalError("property violated: \(message())", file: file, line: line) }
}

/// A file of `Fuzz/data` (the folder `BROKER_FUZZ_DATA` names; scripts/fuzz.sh sets it).
package func fuzzData(_ name: String) -> [UInt8] {
    guard let folder = getenv("BROKER_FUZZ_DATA").map({ String(cString: $0) }) else {
        fatalError("BROKER_FUZZ_DATA is not set: run the harness through scripts/fuzz.sh")
    }
    do {
        return try PosixFile.read(path: folder + "/" + name, maxSize: 1024 * 1024)
    } catch {
        fatalError("cannot read \(folder)/\(name): \(error.reason)")
    }
}

/// The input split at its first byte: a selector and the rest, so that one harness can reach several readers.
package func selector(_ input: [UInt8]) -> (UInt8, [UInt8]) {
    guard let first = input.first else { return (0, []) }
    return (first, Array(input.dropFirst()))
}
