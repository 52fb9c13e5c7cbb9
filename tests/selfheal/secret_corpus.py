"""Secret forms as error reports really carry them, by category, and debugging text that must
survive the scrubber unchanged.

The categories follow what the best scrubbers cover — Sentry Relay's PII rules (``@password``,
``@bearer``, ``@pemkey``, ``@urlauth``, ``@iban``, ``@mac``, ``@imei`` …), gitleaks' rules
(vendor prefixes, ``generic-api-key``) and detect-secrets' plugins (``KeywordDetector``,
``HighEntropyString``, ``AzureStorageKey``, ``TwilioKey``, ``Mailchimp`` …):

* ``keyword`` — a value under a name that says secret, in every syntax a report may quote;
* ``generic`` — a random value under *any* name (``x=``, ``ENCRYPTION_SEED:``);
* ``provider`` — vendor keys recognised by their prefix and shape;
* ``cloud`` — connection strings and cloud credentials (Azure, AWS, GCP);
* ``cli`` — passwords on command lines and in ``.netrc``;
* ``header`` — HTTP credentials (``Authorization``, cookies, ``X-Api-Key``);
* ``private-key`` — key files (PEM, PuTTY, JSON-escaped PEM);
* ``split`` — a token a logger or a string literal wrapped onto the next line;
* ``pii`` — bank accounts (IBAN), device ids (MAC, IMEI).

Every value is fake but has the real shape (prefix, length, alphabet, checksum); the random
parts come from a seeded generator, so they are the same on every run. ``secrets`` lists what
must not survive (each fragment of a split token); ``census``: the validator's entropy census
alone — no rule — must block the raw text (the form is random enough to be caught without
knowing its shape).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

_RNG = random.Random(1313)
_ALNUM = string.ascii_letters + string.digits
_HEXL = "0123456789abcdef"
_URL = _ALNUM + "-_"
_B64 = _ALNUM + "+/"
_UPPER = string.ascii_uppercase + string.digits
_LOWER = string.ascii_lowercase + string.digits


def _r(n: int, alphabet: str = _ALNUM) -> str:
    """``n`` random characters with at least two digits and, if the alphabet has both cases,
    both cases (a value a generator produced, not a word)."""
    both = any(c.isupper() for c in alphabet) and any(c.islower() for c in alphabet)
    while True:
        s = "".join(_RNG.choice(alphabet) for _ in range(n))
        if sum(c.isdigit() for c in s) >= min(2, n // 3) and (
                not both or (any(c.isupper() for c in s) and any(c.islower() for c in s))):
            return s


def _hex(n: int) -> str:
    return _r(n, _HEXL)


TB = (
    "Traceback (most recent call last):\n"
    '  File "src/butlers/modules/billing/sync.py", line 57, in sync_invoices\n'
    "    await self._push(batch)\n"
    '  File "src/butlers/modules/billing/client.py", line 112, in _push\n'
)


def tb(code: str, error: str) -> str:
    """A traceback whose innermost frame shows ``code`` and that ends with ``error``."""
    return f"{TB}    {code}\n{error}\n"


@dataclass(frozen=True)
class Form:
    id: str
    category: str
    kind: str  # the marker expected: [REDACTED-<kind>]
    secrets: tuple[str, ...]  # none may survive scrubbing
    text: str
    census: bool = True  # the entropy census alone must block the raw text


def form(id: str, category: str, kind: str, text: str, *secrets: str,
         census: bool = True) -> Form:
    for s in secrets:
        assert s in text, (id, s)
    return Form(id, category, kind, secrets, text, census)


def _split(id: str, kind: str, template: str, secret: str, cut: int) -> Form:
    """A form whose secret is cut at ``cut`` by ``template``'s ``{a}``…``{b}`` gap."""
    a, b = secret[:cut], secret[cut:]
    return form(id, "split", kind, template.format(a=a, b=b), a, b)


_v = _r  # short alias for the table below


FORMS: list[Form] = [
    # --- keyword: the name says secret ---------------------------------------------------------
    form("kw-shell-export", "keyword", "SECRET",
         "+ export DB_PASSWORD=" + (s := "Zq8" + _v(13)) + "\n+ exec python -m app.worker\n"
         "RuntimeError: worker exited with status 1", s, census=True),
    form("kw-pgpassword", "keyword", "SECRET",
         "subprocess.CalledProcessError: Command 'PGPASSWORD=" + (s := _v(18))
         + " psql -h db -U app -c select 1' returned non-zero exit status 2.", s),
    form("kw-yaml-bare", "keyword", "SECRET",
         "yaml.constructor.ConstructorError: in 'settings.yaml', line 7\n  smtp:\n    host: "
         "mail\n    password: Winter" + (s := "2024!" + _v(6)) + "\n    port: 587",
         "Winter" + s, census=False),
    form("kw-yaml-quoted", "keyword", "SECRET",
         'pydantic_core.ValidationError: 1 validation error for OAuthSettings\n  client_secret: '
         '"' + (s := _v(24)) + '"\n  Input should be a valid URL', s),
    form("kw-json", "keyword", "SECRET",
         'httpx.HTTPStatusError: 401 for POST /login body {"username": "svc-sync", "passwd": "'
         + (s := "t0ps3cret-" + _v(8)) + '"}', s, census=False),
    form("kw-json-escaped", "keyword", "SECRET",
         'ValueError: bad payload "{\\"user\\": \\"svc\\", \\"password\\": \\"'
         + (s := "Hunter2-" + _v(10)) + '\\"}"', s, census=False),
    form("kw-json-double-escaped", "keyword", "SECRET",
         'log: "msg=\\"request failed\\" body=\\"{\\\\\\"api_key\\\\\\": \\\\\\"'
         + (s := _v(28)) + '\\\\\\"}\\""', s),
    form("kw-python-repr", "keyword", "SECRET",
         tb("resp = await self.http.post(url, json=payload)",
            "ClientError: Settings(api_key='" + (s := _v(32)) + "', region='eu-west-1', "
            "debug=False)"), s),
    form("kw-kwargs-in-code", "keyword", "SECRET",
         tb('conn = await asyncpg.connect(user="app", password="' + (s := "S3cr3t!" + _v(7))
            + '")', "asyncpg.exceptions.InvalidPasswordError: password authentication failed "
            'for user "app"'), s, census=False),
    form("kw-ini", "keyword", "SECRET",
         "botocore.exceptions.ConfigParseError: Unable to parse config file: ~/.aws/credentials"
         "\n[default]\naws_access_key_id = AKIA" + _v(16, _UPPER) + "\naws_secret_access_key = "
         + (s := _v(40, _B64)), s),
    form("kw-private-key-id", "keyword", "SECRET",
         'google.auth.exceptions.RefreshError: invalid_grant for {"type": "service_account", '
         '"project_id": "acme-prod", "private_key_id": "' + (s := _hex(40)) + '"}', s),
    form("kw-camel-js", "keyword", "SECRET",
         "TypeError: Cannot read properties of undefined (reading 'token') at "
         "createClient({ clientSecret: '" + (s := _v(30)) + "', scope: 'read' })", s),
    form("kw-go-struct", "keyword", "SECRET",
         'panic: auth failed for &config.Upstream{URL:"https://api.example.com", APIToken:"'
         + (s := _v(36)) + '", Timeout:30}', s),
    form("kw-php-arrow", "keyword", "SECRET",
         "PDOException: SQLSTATE[HY000] [1045] Access denied; config ['db_host' => 'db', "
         "'db_password' => '" + (s := "pa55-" + _v(11)) + "']", s),
    form("kw-toml", "keyword", "SECRET",
         "tomllib.TOMLDecodeError: Invalid value (at line 12, column 14)\n[app]\nsecret_key = \""
         + (s := _v(26)) + '"', s),
    form("kw-docker-env", "keyword", "SECRET",
         "docker: Error response from daemon: Conflict. Command: docker run -e "
         "MYSQL_ROOT_PASSWORD=" + (s := _v(20)) + " -p 3306:3306 mysql:8", s),
    form("kw-session-id", "keyword", "SECRET",
         "werkzeug.exceptions.BadRequest: stale session_id=" + (s := _v(32, _LOWER))
         + " for /account", s),
    form("kw-passphrase", "keyword", "SECRET",
         'ssh: could not load key with passphrase: "' + (s := "correct-battery-" + _v(6))
         + '"', s, census=False),
    form("kw-webhook-secret", "keyword", "SECRET",
         "stripe.error.SignatureVerificationError: No signatures found; "
         "STRIPE_WEBHOOK_SIGNING_KEY=" + (s := _v(32)), s),
    form("kw-cli-flag-equals", "keyword", "SECRET",
         "Error: exit status 1: pg_dump --host=db --username=backup --password="
         + (s := "Bk" + _v(14)) + " app", s),
    form("kw-cli-flag-space", "keyword", "SECRET",
         "subprocess.CalledProcessError: Command '['deployctl', 'push', '--api-token', '"
         + (s := _v(40)) + "', '--env', 'prod']' returned non-zero exit status 1.", s),
    form("kw-url-query", "keyword", "SECRET",
         "httpx.HTTPStatusError: 400 Bad Request for url /oauth/callback?code=abc&access_token="
         + (s := _v(40)) + "&state=xyz", s),
    form("kw-url-encoded", "keyword", "SECRET",
         "requests.exceptions.HTTPError: 403 for /v2/login?user=ops&password="
         + (s := "p%40ss%21" + _v(10)) + "&remember=1", s, census=False),
    # --- generic: any name, a random value ----------------------------------------------------
    form("gen-encryption-key", "generic", "SECRET",
         "cryptography.fernet.InvalidToken while loading ENCRYPTION_KEY="
         + (s := _v(43, _URL) + "=") + " from the environment", s),
    form("gen-x", "generic", "SECRET",
         "AssertionError: expected signature to verify, x=" + (s := _v(20)) + " y=1", s),
    form("gen-json-unknown-name", "generic", "SECRET",
         'KeyError: "tenant" in {"nonce_seed": "' + (s := _v(24)) + '", "mode": "live"}', s),
    form("gen-env-salt", "generic", "SECRET",
         "django.core.exceptions.ImproperlyConfigured: APP_SALT=" + (s := _v(32, _B64))
         + " is not valid base64", s),
    form("gen-colon", "generic", "SECRET",
         "jwt.exceptions.InvalidSignatureError: hmac: " + (s := _v(43)), s),
    form("gen-lower-hex", "generic", "SECRET",
         "ValueError: FERNET_SEED=" + (s := _hex(32)) + " has the wrong length", s),
    form("gen-kwarg", "generic", "SECRET",
         tb('client = Client(dsn_blob="' + (s := _v(27)) + '")',
            "TypeError: Client.__init__() got an unexpected keyword argument 'dsn_blob'"), s),
    form("gen-logfmt", "generic", "SECRET",
         'time=2024-05-01T10:00:00Z level=error msg="upstream refused" upstream_cred='
         + (s := _v(22)) + " retries=3", s),
    # --- provider: vendor prefixes --------------------------------------------------------------
    form("twilio-api-key", "provider", "API-KEY",
         "twilio.base.exceptions.TwilioRestException: HTTP 401 error: Unable to create record: "
         "Authenticate with key " + (s := "SK" + _hex(32)), s),
    form("twilio-account-sid", "provider", "API-KEY",
         "TwilioException: account " + (s := "AC" + _hex(32)) + " is suspended", s),
    form("twilio-auth-token", "provider", "SECRET",
         "twilio.base.exceptions.TwilioException: Credentials are required; "
         "TWILIO_AUTH_TOKEN=" + (s := _hex(32)), s),
    form("mailgun-key", "provider", "API-KEY",
         "requests.exceptions.HTTPError: 401 Client Error: UNAUTHORIZED using api:"
         + (s := "key-" + _hex(32)), s),
    form("mailchimp-key", "provider", "API-KEY",
         "mailchimp_marketing.api_client.ApiClientError: 401 API Key Invalid: "
         + (s := _hex(32) + "-us14"), s),
    form("sendgrid-key", "provider", "API-KEY",
         "python_http_client.exceptions.UnauthorizedError: HTTP Error 401 with "
         + (s := "SG." + _v(22, _URL) + "." + _v(43, _URL)), s),
    form("square-access-token", "provider", "API-KEY",
         "square.exceptions.ApiException: UNAUTHORIZED for token " + (s := "sq0atp-" + _v(22)),
         s),
    form("square-oauth-secret", "provider", "API-KEY",
         "square oauth failed: client " + (s := "sq0csp-" + _v(43, _URL)), s),
    form("telegram-bot-token", "provider", "API-KEY",
         "telegram.error.InvalidToken: Invalid token https://api.telegram.org/bot"
         + (s := "5912837465:AA" + _v(33, _URL)) + "/getMe", s),
    form("discord-bot-token", "provider", "API-KEY",
         "discord.errors.LoginFailure: Improper token has been passed: "
         + (s := "MT" + _v(24, _URL) + "." + _v(6, _URL) + "." + _v(38, _URL)), s),
    form("pypi-token", "provider", "API-KEY",
         "HTTPError: 403 Forbidden from https://upload.pypi.org/legacy/ with "
         + (s := "pypi-AgEIcHlwaS5vcmc" + _v(60, _URL)), s),
    form("shopify-token", "provider", "API-KEY",
         "shopify.ApiError: [API] Invalid API key or access token " + (s := "shpat_" + _hex(32)),
         s),
    form("digitalocean-token", "provider", "API-KEY",
         "digitalocean.DataReadError: Unable to authenticate you with "
         + (s := "dop_v1_" + _hex(64)), s),
    form("vault-token", "provider", "API-KEY",
         "hvac.exceptions.Forbidden: permission denied, token " + (s := "hvs." + _v(90, _URL)),
         s),
    form("databricks-token", "provider", "API-KEY",
         "databricks.sdk.errors.Unauthenticated: invalid token " + (s := "dapi" + _hex(32)), s),
    form("grafana-service-token", "provider", "API-KEY",
         "grafana_client.client.GrafanaUnauthorizedError: 401 for "
         + (s := "glsa_" + _v(32) + "_" + _hex(8)), s),
    form("doppler-token", "provider", "API-KEY",
         "doppler: Invalid Auth token " + (s := "dp.pt." + _v(43)), s),
    form("linear-key", "provider", "API-KEY",
         "gql.transport.exceptions.TransportQueryError: Authentication required with "
         + (s := "lin_api_" + _v(40)), s),
    form("postman-key", "provider", "API-KEY",
         "newman: error: invalid api key " + (s := "PMAK-" + _hex(24) + "-" + _hex(34)), s),
    form("newrelic-key", "provider", "API-KEY",
         "newrelic.api: 403 forbidden for User key " + (s := "NRAK-" + _v(27, _UPPER)), s),
    form("sentry-org-token", "provider", "API-KEY",
         "sentry-cli error: API request failed with token " + (s := "sntrys_" + _v(60)), s),
    form("age-secret-key", "provider", "API-KEY",
         "age: error: failed to parse identity file: " + (s := "AGE-SECRET-KEY-1" + _v(
             58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L")), s),
    form("azure-ad-client-secret", "provider", "API-KEY",
         "msal.ClientApplication: AADSTS7000215: Invalid client secret provided: "
         + (s := _v(3) + "8Q~" + _v(31, _URL + "~.")), s),
    form("atlassian-token", "provider", "API-KEY",
         "jira.exceptions.JIRAError: HTTP 401 token " + (s := "ATATT3xFfGF0" + _v(180, _URL)),
         s),
    form("dockerhub-pat", "provider", "API-KEY",
         "Error response from daemon: unauthorized: incorrect username or password "
         + (s := "dckr_pat_" + _v(27, _URL)), s),
    form("groq-key", "provider", "API-KEY",
         "groq.AuthenticationError: Error code: 401 - invalid api key " + (s := "gsk_" + _v(52)),
         s),
    form("gitlab-runner-token", "provider", "API-KEY",
         "ERROR: Verifying runner... is removed runner=" + (s := "glrt-" + _v(20, _URL)), s),
    form("google-oauth-client-secret", "provider", "API-KEY",
         "google.auth.exceptions.RefreshError: invalid_client for "
         + (s := "GOCSPX-" + _v(28, _URL)), s),
    form("google-oauth-access-token", "provider", "API-KEY",
         "googleapiclient.errors.HttpError: 401 Request had invalid authentication credentials "
         + (s := "ya29." + _v(120, _URL)), s),
    form("stripe-webhook-secret", "provider", "API-KEY",
         "stripe.error.SignatureVerificationError: expected " + (s := "whsec_" + _v(32)), s),
    form("supabase-token", "provider", "API-KEY",
         "supabase: Unauthorized: " + (s := "sbp_" + _hex(40)), s),
    form("heroku-token", "provider", "API-KEY",
         "heroku: Invalid credentials provided " + (s := "HRKU-" + _v(60, _URL)), s),
    form("terraform-cloud-token", "provider", "API-KEY",
         "Error: Failed to request discovery document: 401 token "
         + (s := _v(14) + ".atlasv1." + _v(67, _URL)), s),
    form("slack-refresh-token", "provider", "API-KEY",
         "slack_sdk.errors.SlackApiError: invalid_refresh_token "
         + (s := "xoxe-1-" + _v(140, _URL)), s),
    # --- cloud: connection strings and cloud credentials ------------------------------------
    form("azure-storage-account-key", "cloud", "SECRET",
         "azure.core.exceptions.ClientAuthenticationError: Server failed to authenticate the "
         "request. conn=DefaultEndpointsProtocol=https;AccountName=prodlogs;AccountKey="
         + (s := _v(86, _B64) + "==") + ";EndpointSuffix=core.windows.net", s),
    form("azure-service-bus-key", "cloud", "SECRET",
         "azure.servicebus.exceptions.ServiceBusAuthenticationError: Unauthorized "
         "Endpoint=sb://orders-prod.servicebus.windows.net/;SharedAccessKeyName="
         "RootManageSharedAccessKey;SharedAccessKey=" + (s := _v(43, _B64) + "="), s),
    form("azure-sas-signature", "cloud", "SECRET",
         "azure.core.exceptions.HttpResponseError: AuthenticationFailed for "
         "https://prodlogs.blob.core.windows.net/logs/app.log?sv=2022-11-02&ss=b&srt=o&sp=r"
         "&sig=" + (s := _v(20) + "%2B" + _v(20) + "%3D"), s),
    form("aws-secret-env", "cloud", "SECRET",
         "botocore.exceptions.ClientError: SignatureDoesNotMatch; env AWS_SECRET_ACCESS_KEY="
         + (s := _v(40, _B64)), s),
    form("aws-session-token", "cloud", "SECRET",
         "botocore.exceptions.ClientError: ExpiredToken aws_session_token = "
         + (s := "FwoGZXIvYXdzE" + _v(200, _B64)), s),
    form("aws-presigned-url", "cloud", "SECRET",
         "botocore.exceptions.ClientError: 403 for https://s3.amazonaws.com/bucket/key?"
         "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20240501T100000Z&X-Amz-Signature="
         + (s := _hex(64)), s, census=True),
    form("gcp-service-account-pem", "cloud", "PRIVATE-KEY",
         'google.auth.exceptions.MalformedError: {"type": "service_account", "private_key": '
         '"-----BEGIN PRIVATE KEY-----\\n' + (s := "MIIEv" + _v(60, _B64)) + "\\n"
         + _v(64, _B64) + '\\n-----END PRIVATE KEY-----\\n", "client_email": "x"}', s),
    form("jdbc-url", "cloud", "SECRET",
         "java.sql.SQLException: Access denied for jdbc:postgresql://db:5432/app?user=app&"
         "password=" + (s := "Pg" + _v(16)), s),
    form("redis-url-password", "cloud", "DB-URL",
         "redis.exceptions.AuthenticationError: invalid password for rediss://default:"
         + (s := _v(32)) + "@cache.example.net:6380/0", s),
    form("ado-connection-string", "cloud", "SECRET",
         "pyodbc.InterfaceError: ('28000', 'Login failed') Server=tcp:sql.example.com,1433;"
         "Database=app;User ID=app;Password=" + (s := "Sq1" + _v(13)) + ";Encrypt=True;", s),
    # --- cli: command lines and netrc ---------------------------------------------------------
    form("mysql-p-attached", "cli", "SECRET",
         "subprocess.CalledProcessError: Command 'mysql -uroot -p" + (s := "S3cret" + _v(8))
         + " -h 127.0.0.1 app < dump.sql' returned non-zero exit status 1.", s, census=False),
    form("mysqldump-p-quoted", "cli", "SECRET",
         "RuntimeError: backup failed: mysqldump --single-transaction -u backup -p'"
         + (s := "b4ckup!" + _v(9)) + "' shop", s, census=False),
    form("netrc-one-line", "cli", "SECRET",
         "netrc.NetrcParseError: bad follower token in ~/.netrc:\nmachine api.example.com "
         "login deploy password " + (s := "d3ploy" + _v(10)), s, census=False),
    form("netrc-multi-line", "cli", "SECRET",
         "fatal: netrc entry rejected:\nmachine git.example.com\n  login ci-bot\n  password "
         + (s := "ci" + _v(14)) + "\n", s, census=False),
    form("curl-user", "cli", "SECRET",
         "subprocess.CalledProcessError: Command 'curl -fsS -u admin:" + (s := "adm1n" + _v(11))
         + " https://ci.example.com/api/json' returned non-zero exit status 22.", s),
    form("sshpass", "cli", "SECRET",
         "FileNotFoundError: [Errno 2] No such file or directory: sshpass -p '"
         + (s := "ssh" + _v(13)) + "' ssh deploy@127.0.0.1", s, census=False),
    form("docker-login", "cli", "SECRET",
         "Error: docker login -u ci -p " + (s := _v(36)) + " registry.example.com failed", s),
    form("redis-cli", "cli", "SECRET",
         "redis-cli -h 127.0.0.1 -a " + (s := "r3dis" + _v(15)) + " ping: NOAUTH", s),
    form("openssl-passin", "cli", "SECRET",
         "OSError: openssl pkcs12 -in cert.p12 -passin pass:" + (s := "p12" + _v(13))
         + " -nodes: mac verify failure", s),
    # --- header: HTTP credentials -------------------------------------------------------------
    form("x-api-key-header", "header", "SECRET",
         "httpx.HTTPStatusError: 403 with headers {'X-Api-Key': '" + (s := _v(32))
         + "', 'Accept': 'application/json'}", s),
    form("cookie-header", "header", "SECRET",
         "aiohttp.ClientResponseError: 401, request headers: Cookie: sessionid="
         + (s := _v(32, _LOWER)) + "; theme=dark", s),
    form("set-cookie-header", "header", "SECRET",
         "AssertionError: Set-Cookie: auth_session=" + (s := _v(40, _URL))
         + "; Path=/; HttpOnly; Secure", s),
    form("proxy-authorization", "header", "TOKEN",
         "urllib3.exceptions.ProxyError: 407 with Proxy-Authorization: Basic "
         + (s := _v(30, _B64) + "=="), s),
    form("x-auth-token", "header", "SECRET",
         "keystoneauth1.exceptions.http.Unauthorized: 401 X-Auth-Token: " + (s := _v(64, _URL)),
         s),
    form("bearer-lowercase", "header", "TOKEN",
         "requests.exceptions.HTTPError: 401 authorization: bearer " + (s := _v(40, _URL)), s),
    form("git-remote-token", "header", "CREDENTIALS",
         "git.exc.GitCommandError: Cmd('git') failed: fetch https://x-access-token:"
         + (s := "ghs_" + _v(36)) + "@github.com/acme/app.git", s),
    form("jwt-in-query", "header", "JWT",
         "httpx.HTTPStatusError: 401 for url /api/me?id_token="
         + (s := "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiI" + _v(40, _URL) + "." + _v(43, _URL)), s),
    # --- private-key --------------------------------------------------------------------------
    form("putty-key", "private-key", "PRIVATE-KEY",
         "paramiko.ssh_exception.SSHException: not a valid key file:\n"
         "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy\n"
         "Public-Lines: 2\nAAAAC3NzaC1lZDI1NTE5AAAAI" + _v(20, _B64) + "\n" + _v(24, _B64)
         + "\nPrivate-Lines: 1\n" + (s := "AAAAI" + _v(40, _B64)) + "\nPrivate-MAC: "
         + _hex(64) + "\n", s),
    form("pem-encrypted", "private-key", "PRIVATE-KEY",
         "ValueError: Bad decrypt. Incorrect password?\n-----BEGIN ENCRYPTED PRIVATE KEY-----\n"
         + (s := "MIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkqhkiG9w0BBQww" + _v(20, _B64)) + "\n"
         + _v(64, _B64) + "\n-----END ENCRYPTED PRIVATE KEY-----", s),
    form("pgp-private-block", "private-key", "PRIVATE-KEY",
         "gnupg: import failed\n-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
         + (s := "lQOYBGY" + _v(57, _B64)) + "\n=" + _v(4, _B64)
         + "\n-----END PGP PRIVATE KEY BLOCK-----", s),
    # --- split: a token wrapped onto the next line --------------------------------------------
    _split("split-wrapped-log", "API-KEY",
           "2024-05-01 10:00:00 ERROR openai.AuthenticationError: Incorrect API key provided: "
           "{a}\n{b}. You can find your API key at the dashboard.",
           "sk-proj-" + _v(48), 20),
    _split("split-python-concat", "API-KEY",
           tb('TOKEN = ("{a}"', '                 "{b}")\n'
              "github.GithubException.BadCredentialsException: 401"),
           "ghp_" + _v(36), 17),
    _split("split-indented-continuation", "SECRET",
           "pydantic_core.ValidationError: 1 validation error for Settings\nsigning_key\n"
           "  Value error, bad key {a}\n  {b} [type=value_error]",
           _v(48), 26),
    _split("split-backslash-continuation", "SECRET",
           "bash: deploy.sh: line 3: curl -H \"X-Token: {a}\\\n{b}\" failed",
           _v(40), 22),
    # --- pii: bank accounts and devices -------------------------------------------------------
    form("iban-de", "pii", "IBAN",
         "stripe.error.InvalidRequestError: No such bank account DE89 3704 0044 0532 0130 00",
         "DE89 3704 0044 0532 0130 00", census=False),
    form("iban-gb-compact", "pii", "IBAN",
         "ValueError: payout to GB82WEST12345698765432 rejected", "GB82WEST12345698765432",
         census=False),
    form("iban-fr", "pii", "IBAN",
         "sepa.errors.MandateError: FR1420041010050500013M02606 has no mandate",
         "FR1420041010050500013M02606", census=False),
    form("iban-nl-json", "pii", "IBAN",
         'KeyError: "bic" in {"iban": "NL91ABNA0417164300", "name": "x"}',
         "NL91ABNA0417164300", census=False),
    form("mac-address", "pii", "MAC",
         "dhcp: lease conflict for 3c:22:fb:1a:7e:09 on eth0", "3c:22:fb:1a:7e:09",
         census=False),
    form("imei", "pii", "IMEI",
         "DeviceError: IMEI 490154203237518 is blocklisted", "490154203237518", census=False),
    # --- url-path: tokens carried in a URL's path (and query keys) -------------------------------
    # (At the end of the table: the generator's earlier values stay what they were.)
    form("telegram-path-any-shape", "url-path", "API-KEY",
         "httpx.HTTPStatusError: Client error '401 Unauthorized' for url 'https://api.telegram"
         ".org/bot" + (s := "612345789:B" + _v(34, _URL)) + "/sendMessage'", s),
    form("telegram-file-path", "url-path", "API-KEY",
         "telegram.error.BadRequest: GET https://api.telegram.org/file/bot"
         + (s := "123456:AA" + _v(33, _URL)) + "/photos/file_12.jpg: 404", s),
    form("telegram-local-bot-api", "url-path", "API-KEY",
         "aiohttp.ClientConnectorError: POST http://127.0.0.1:8081/bot"
         + (s := "5912837465:" + _v(35, _URL)) + "/getUpdates?timeout=30", s),
    form("discord-webhook-versioned", "url-path", "WEBHOOK-URL",
         "discord.errors.NotFound: 404 POST https://discord.com/api/v10/webhooks/"
         "112233445566778899/" + (s := _v(68, _URL)), s),
    form("discord-webhook-path", "url-path", "TOKEN",
         '127.0.0.1 - - "POST /api/webhooks/112233445566778899/' + (s := _v(68, _URL))
         + ' HTTP/1.1" 401', s),
    form("slack-webhook-path", "url-path", "TOKEN",
         "proxy: upstream 404 for POST /services/T0ABCDEF1/B0ABCDEF2/" + (s := _v(24))
         + " (hooks)", s),
    form("path-token-segment", "url-path", "TOKEN",
         "requests.exceptions.HTTPError: 403 for GET /v1/token/" + (s := _v(32))
         + "/refresh", s),
    form("ifttt-key-segment", "url-path", "TOKEN",
         "urllib.error.HTTPError: 401 for https://maker.ifttt.com/trigger/deploy/with/key/"
         + (s := _v(22, _URL)), s, census=False),
    form("mattermost-hook", "url-path", "TOKEN",
         "mattermost: 400 POST https://chat.example.com/hooks/" + (s := _v(26, _LOWER))
         + ": invalid payload", s),
    form("query-key", "url-path", "SECRET",
         "httpx.HTTPStatusError: 403 for url 'https://maps.example.com/api/geocode/json?"
         "address=x&key=" + (s := _v(32)) + "'", s),
    form("query-key-and-token", "url-path", "SECRET",
         "trello: 401 for GET /1/boards/abc/cards?key=" + (k := _hex(32)) + "&token="
         + (s := _hex(64)), k, s),
    # --- cli: option-attached passwords inside any quoting -------------------------------------
    form("mysql-argv-list", "cli", "SECRET",
         "subprocess.CalledProcessError: Command '['mysql', '-u', 'root', '-p"
         + (s := "S3cret" + _v(6)) + "', 'app']' returned non-zero exit status 1.", s,
         census=False),
    form("mysql-json-array", "cli", "SECRET",
         'runner: {"argv": ["mysql","-h","db","-p' + (s := "Pa55-" + _v(7)) + '"], "rc": 1}', s,
         census=False),
    form("mysql-shell-quoted", "cli", "SECRET",
         "sh: 1: mysql -u root '-p" + (s := "S3cret!" + _v(5)) + "' app: Access denied", s,
         census=False),
    form("mariadb-dump-json-escaped", "cli", "SECRET",
         'log: "{\\"cmd\\": [\\"mariadb-dump\\", \\"-p' + (s := "Dump" + _v(8))
         + '\\", \\"shop\\"]}"', s, census=False),
    form("password-equals-argv", "cli", "SECRET",
         "CalledProcessError: Command '[\"psql\", \"--password=" + (s := "Pg" + _v(10))
         + "\"]' returned non-zero exit status 2.", s, census=False),
    form("password-two-argv-items", "cli", "SECRET",
         "Command '['deployctl', 'push', '--password', '" + (s := "Dep1oy" + _v(6))
         + "']' returned non-zero exit status 1.", s, census=False),
    form("sshpass-argv", "cli", "SECRET",
         "Command '['sshpass', '-p', '" + (s := _v(20))
         + "', 'ssh', 'deploy@127.0.0.1']' returned non-zero exit status 5.", s),
    form("docker-login-argv", "cli", "SECRET",
         "Command '['docker', 'login', '-u', 'ci', '-p', '" + (s := _v(20))
         + "', 'registry.example.com']' returned non-zero exit status 1.", s),
    form("redis-cli-argv", "cli", "SECRET",
         "Command '['redis-cli', '-a', '" + (s := _v(24)) + "', 'ping']' failed", s),
    form("curl-user-argv", "cli", "SECRET",
         "Command '['curl', '-fsS', '-u', 'admin:" + (s := "adm1n" + _v(7))
         + "', 'https://ci.example.com/api']' returned non-zero exit status 22.", s,
         census=False),
    form("mongosh-p", "cli", "SECRET",
         "MongoServerError: Authentication failed: mongosh -u admin -p " + (s := "M0ngo" + _v(7))
         + " --authenticationDatabase admin", s, census=False),
    form("ldapsearch-w", "cli", "SECRET",
         "ldap_bind: Invalid credentials (49): ldapsearch -x -D cn=admin,dc=example,dc=org -w "
         + (s := "Ld4p" + _v(8)) + " -b dc=example,dc=org", s, census=False),
    form("sqlcmd-P", "cli", "SECRET",
         "Sqlcmd: Error: Login failed for user 'sa': sqlcmd -S db -U sa -P "
         + (s := "Sq1" + _v(9)) + " -Q 'select 1'", s, census=False),
    form("keytool-storepass", "cli", "SECRET",
         "keytool error: java.io.IOException: keystore password was incorrect: keytool -list "
         "-keystore app.jks -storepass " + (s := "Ks" + _v(10)), s, census=False),
    form("7z-p-attached", "cli", "SECRET",
         "Command '7z a -p" + (s := "Arch" + _v(8)) + " backup.7z data' returned 2", s,
         census=False),
    form("token-flag-quoted", "cli", "SECRET",
         "Error: exec \"--token=" + (s := _v(24)) + "\" \"--api-key=" + (k := _v(24))
         + "\" failed", s, k),
    form("secret-flag-argv", "cli", "SECRET",
         "Command '['vault-sync', '--secret', '" + (s := _v(24))
         + "']' returned non-zero exit status 1.", s),
    form("pgpassword-argv", "cli", "SECRET",
         "Command '['env', 'PGPASSWORD=" + (s := _v(20))
         + "', 'psql', '-h', 'db']' returned non-zero exit status 2.", s),
]


def _forms_by_id() -> dict[str, Form]:
    out: dict[str, Form] = {}
    for f in FORMS:
        assert f.id not in out, f.id
        out[f.id] = f
    return out


BY_ID = _forms_by_id()
CATEGORIES = sorted({f.category for f in FORMS})

# Debugging text that must come through the scrubber (and the validator) unchanged.
BENIGN: list[str] = [
    'File "src/butlers/modules/memory/tools/facts.py", line 88, in memory_store_fact',
    '  File "/usr/lib/python3.11/site-packages/asyncpg/connection.py", line 317, in execute',
    "asyncpg.exceptions.UndefinedTableError: relation \"butler.t_3\" does not exist",
    "commit abdac271596b69aca7e810a8ab4c7e9094343042",
    "Merge: 3f2a9c1 8e7b6a5",
    "index 3f2a9c1d..8e7b6a5f 100644",
    "HEAD is now at 57663265 fix: tolerate rows without user_id",
    "git rev-parse HEAD: 57663265411e2125f92f337e5c8c544ed71430ea",
    "sha256:76348d7253418f6dfc4d0e1af2a97812fa014ec81a7bba1dbe64fc0ea23f0247",
    "Fingerprint: 76348d7253418f6dfc4d0e1af2a97812fa014ec81a7bba1dbe64fc0ea23f0247",
    "branch healing/76348d725341-a1b2c3 at 57663265411e2125f92f337e5c8c544ed71430ea",
    "ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 5432)",
    "listening on localhost:8083 and 127.0.0.1:9090",
    "redis.exceptions.ConnectionError: Error 111 connecting to localhost:6379. Refused.",
    "OSError: [Errno 98] Address already in use: ('0.0.0.0', 8083)",
    "KeyError: 'password'",
    "TypeError: login() missing 1 required positional argument: 'token'",
    "AttributeError: 'NoneType' object has no attribute 'api_key'",
    "def verify(token: str, *, secret: bytes, password: str | None = None) -> bool:",
    'raise AuthenticationError("invalid api key")',
    "asyncpg.exceptions.InvalidPasswordError: password authentication failed for user app",
    "the password is too short (min 12 characters)",
    "bearer token expired, refreshing",
    "Authorization header missing",
    "max_tokens=4096 tokens_used=8192 temperature=0.2",
    "ValueError: invalid literal for int() with base 10: 'abc'",
    "RecursionError: maximum recursion depth exceeded while calling a Python object",
    "ModuleNotFoundError: No module named 'healer.selfheal.secret_rules'",
    "ImportError: cannot import name 'Sanitizer' from partially initialized module",
    "asyncio.exceptions.TimeoutError after 30.0 s (attempt 3/5)",
    "<Task pending name='healing-20240501T100000-a1b2c3d4' coro=<Dispatcher.run() running>>",
    "<app.db.Pool object at 0x7f3a9c1d8e7b>",
    "time=2024-05-01T10:00:00.123Z level=error msg=\"db timeout\" retries=3 port=5432",
    "trace_id=19ac0c565276b738ac670aa990e9307e span_id=52072d222b7db031",
    "event_id: f511a634efb053874e80d6f103b240fa",
    "x86_64-linux-gnu aarch64-apple-darwin23.4.0 python3.11 cp311-manylinux_2_17",
    "Content-Type: application/json; charset=utf-8",
    "User-Agent: python-httpx/0.27.0",
    "HTTP/1.1 503 Service Unavailable",
    "Python 3.11.9 (main, Apr  2 2024, 08:25:04) [GCC 12.2.0] on linux",
    "pip install 'healer[fast]>=0.1.0'",
    "tests/selfheal/test_sanitize.py::TestCorpus::test_every_form_is_redacted[jwt] PASSED",
    "@@ -1,4 +1,5 @@ def lookup(row):",
    '-    return row["user_id"]\n+    return row.get("user_id")',
    "UndefinedTableErrorHandlerFactoryV2 ChaCha20Poly1305 TestSanitizerRedactsEverything",
    "/tmp/pytest-of-ci/pytest-12/test_scrub0/state/selfheal/logs/20240501T100000-a1b2c3d4.log",
    "SELECT id, email FROM users WHERE id = $1 LIMIT 50",
    "line 42, column 7: expected ':' after key",
    "Ports 8080-8090 on localhost are taken; try http://localhost:8091/health",
    "base64.b64encode(b'hello') == b'aGVsbG8='",
    "node_modules/.pnpm/@babel+core@7.24.5/node_modules/@babel/core/lib/index.js:12:3",
    "docker pull python:3.11-slim && docker run --rm -p 8083:8083 healer",
    "session expired; cookie rejected (SameSite=Lax)",
    "mysql -u root -h 127.0.0.1 app < dump.sql",
    "git push origin healing/76348d725341-a1b2c3 --force-with-lease",
]

# Near misses of the URL-path and command-line rules, which must survive as well: ``-p`` as a
# port or a plugin, a password prompt, a shell variable, a route named like a credential, a
# file that holds a password (its path is not the secret: it says where to look, like an
# environment variable's name), a short ``key=`` that names a field.
NEAR_MISSES: list[str] = [
    "uvicorn app:app --host 127.0.0.1 -p 8080",
    "ssh -p 22 deploy@127.0.0.1 uptime",
    "python -m pytest -q -p no:cacheprovider tests/selfheal",
    "docker run --name mysql -p 3306:3306 mysql:8",
    "docker run --name mongo -p 27017:27017 mongo:7",
    "redis-cli -h 127.0.0.1 -p 6379 ping",
    "Command '['mysql', '-u', 'root', '-p', 'app']' returned non-zero exit status 1.",
    "mysql -u root -p$MYSQL_PWD app < dump.sql",
    "GET https://example.com/bot/help 404",
    "GET http://127.0.0.1:8083/api/bot/status 200",
    "GET /api/v1/tokens/revoke 204",
    "DELETE /api/v1/keys/ssh-deploy-key 404",
    "--password-file=/run/secrets/db_password",
    "Command '['restic', '--password-file', '/run/secrets/restic']' failed",
    "docker login --password-stdin registry.example.com",
    "keytool -list -keystore app.jks -storepass:env KS_PASS",
    "GET /search?q=x&key=users",
    "curl -sS --user-agent 'healer/1.0' http://127.0.0.1:8083/health",
]
