import BrokerCore
package import HTTPTypes

extension HTTPFields {
    /// The field's value, as `self[name]` gives it (several fields of one name joined by `, `, or `; ` for
    /// `Cookie`), without its cost: that getter joins through a lazy map the standard library runs unspecialized,
    /// ~2,000 instructions a call under callgrind (10,382 per CI mint), where a single field needs none.
    package func value(_ name: HTTPField.Name) -> String? {
        let values = self[values: name]
        switch values.count {
        case 0: return nil
        case 1: return values[0]
        default: return values.joined(separator: name == .cookie ? "; " : ", ")
        }
    }

    /// The `Authorization` field. RFC 9110 §11.6.2 makes it a single field, not a list: two are refused by name
    /// (400, `invalid_request`) rather than joined into `Bearer a, Bearer b`, a credential that fails to verify
    /// with an error that does not say why.
    func authorization() throws(APIError) -> String? {
        let values = self[values: .authorization]
        guard values.count <= 1 else {
            throw APIError.invalidRequest("send one Authorization field (this request has \(values.count))")
        }
        return values.first
    }
}
