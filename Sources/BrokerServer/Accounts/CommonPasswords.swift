/// The most common passwords of 8 or more characters, refused at registration (NIST SP 800-63B 3.1.1.2).
///
/// The list is `common-passwords.txt` beside this file, one password per line, most common first, lowercase:
/// zxcvbn 4.4.28's "passwords" frequency list (PyPI), entries of 8 to 128 characters. The EmbedText build
/// plugin compiles it in as `commonPasswordsText`, so the binary needs no file beside it.
package enum CommonPasswords {
    /// The list, one password per line.
    package static var text: String { commonPasswordsText }
}
