import CQREncode

/// QR codes from Debian's libqrencode, for the two places broker shows one: the terminal (`broker login --device`,
/// `broker mfa totp add`, drawn by BrokerClient) and the account page (an SVG, drawn here).
package enum QRCode {
    /// The modules, row by row (`true`: dark), as libqrencode lays them out at error correction level M; `nil`
    /// when the text cannot be encoded (too long).
    package static func modules(_ text: String) -> [[Bool]]? {
        guard let code = QRcode_encodeString(text, 0, QR_ECLEVEL_M, QR_MODE_8, 1) else { return nil }
        defer { QRcode_free(code) }
        let width = Int(code.pointee.width)
        var rows: [[Bool]] = []
        for row in 0..<width {
            rows.append((0..<width).map { column in code.pointee.data[row * width + column] & 1 == 1 })
        }
        return rows
    }

    /// The code as an SVG document (dark modules on white, the four-module quiet zone the standard asks for),
    /// one path, scaled by the page: markup with nothing taken from the text but the modules.
    package static func svg(_ text: String, size: Int = 232, quietZone: Int = 4) -> String? {
        guard let modules = modules(text) else { return nil }
        let side = modules.count + 2 * quietZone
        var path = ""
        for (row, line) in modules.enumerated() {
            var column = 0
            while column < line.count {
                guard line[column] else {
                    column += 1
                    continue
                }
                let start = column
                while column < line.count, line[column] { column += 1 }
                path += "M\(start + quietZone) \(row + quietZone)h\(column - start)v1h-\(column - start)z"
            }
        }
        return """
            <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 \(side) \(side)" width="\(size)" height="\(size)" \
            shape-rendering="crispEdges" role="img" aria-label="QR code"><rect width="\(side)" height="\(side)" \
            fill="#fff"/><path d="\(path)" fill="#000"/></svg>
            """
    }
}
