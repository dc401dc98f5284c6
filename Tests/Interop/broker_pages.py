"""broker's sign-in, consent and onward pages as a script reads them (requests, no browser): the forms' actions
and hidden fields, the onward page's refresh target, and the two steps a person takes on them. Shared by the
relying-party interop scripts and the authorization-code benchmark."""
import html.parser


class Forms(html.parser.HTMLParser):
    """The forms of a page (action and hidden inputs) and a `<meta http-equiv="refresh">` target."""

    def __init__(self):
        super().__init__()
        self.forms = []
        self.refresh = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append({"action": attrs.get("action"), "fields": {}})
        elif tag == "input" and self.forms and attrs.get("type") == "hidden":
            self.forms[-1]["fields"][attrs["name"]] = attrs.get("value", "")
        elif tag == "meta" and attrs.get("http-equiv") == "refresh":
            self.refresh = attrs["content"].split("url=", 1)[1]


def parse(page):
    forms = Forms()
    forms.feed(page)
    return forms


def form(page, action):
    """The hidden fields of the form posting to `action` on `page` (StopIteration when there is none)."""
    return next(f for f in parse(page).forms if f["action"] == action)["fields"]


def sign_in(browser, broker, page, email, password):
    """The sign-in page's email + password form, submitted; the answer (consent page, or onward page)."""
    fields = dict(form(page.text, "/auth/authorize/password"), email=email, password=password)
    return browser.post(broker + "/auth/authorize/password", data=fields, allow_redirects=False)


def allow(browser, broker, consent):
    """The consent page's Allow; the answer (the onward page back to the app)."""
    fields = dict(form(consent.text, "/auth/authorize/consent"), decision="allow")
    return browser.post(broker + "/auth/authorize/consent", data=fields, allow_redirects=False)
