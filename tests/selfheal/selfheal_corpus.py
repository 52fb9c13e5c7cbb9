"""Secrets and personal data in the places they really turn up: tracebacks, messages, logs.

Each ``Case`` is one form: the text it hides in (a realistic traceback or log line), the value
that must not survive sanitising, and the marker kind expected in its place. The values are
fake but shaped like the real thing (right prefixes, lengths, checksums).
"""

from __future__ import annotations

from dataclasses import dataclass

TB_HEAD = (
    "Traceback (most recent call last):\n"
    '  File "src/butlers/modules/memory/tools/facts.py", line 88, in memory_store_fact\n'
    "    await self._store(conn, payload)\n"
    '  File "src/butlers/modules/memory/store.py", line 41, in _store\n'
)


def tb(code_line: str, error: str) -> str:
    """A traceback whose innermost frame shows ``code_line`` and ends with ``error``."""
    return f"{TB_HEAD}    {code_line}\n{error}\n"


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # the marker expected: [REDACTED-<kind>] (or "~" for home paths)
    secret: str  # must not appear in the sanitised text
    text: str


CASES: list[Case] = [
    # --- tokens and API keys -----------------------------------------------------------------
    Case("jwt", "JWT", "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ",
         tb("resp = await client.get(url, token=tok)",
            "jwt.exceptions.ExpiredSignatureError: Signature has expired: eyJhbGciOiJIUzI1NiIsInR5"
            "cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36"
            "POk6yJV_adQssw5c")),
    Case("anthropic-key", "API-KEY", "sk-ant-api03-Xy7Qp2Lm9Nv4Rt8Ks1Jd6Fh3Gz5Wb0Cc-AaBbCcDdEe",
         tb("client = Anthropic(api_key=key)",
            "anthropic.AuthenticationError: invalid x-api-key "
            "sk-ant-api03-Xy7Qp2Lm9Nv4Rt8Ks1Jd6Fh3Gz5Wb0Cc-AaBbCcDdEe")),
    Case("anthropic-admin", "API-KEY", "sk-ant-admin01-Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9",
         "2024-05-01 10:00:00 ERROR admin key sk-ant-admin01-Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9 rejected"),
    Case("openai-project", "API-KEY", "sk-proj-4fGh8JkL2mNp6QrS0tUv4WxY8zAb2CdE",
         tb("openai.api_key = os.environ['OPENAI_API_KEY']",
            "openai.error.AuthenticationError: Incorrect API key provided: "
            "sk-proj-4fGh8JkL2mNp6QrS0tUv4WxY8zAb2CdE")),
    Case("openai-legacy", "API-KEY", "sk-9aB8cD7eF6gH5iJ4kL3mN2oP1qR0sT",
         "RuntimeError: request failed with key=sk-9aB8cD7eF6gH5iJ4kL3mN2oP1qR0sT (401)"),
    Case("aws-access-key", "API-KEY", "AKIAIOSFODNN7EXAMPLE",
         tb("s3.put_object(Bucket=bucket, Key=key, Body=data)",
            "botocore.exceptions.ClientError: InvalidAccessKeyId for AKIAIOSFODNN7EXAMPLE")),
    Case("aws-session-key", "API-KEY", "ASIAY34FZKBOKMUTVV7A",
         "botocore.exceptions.ClientError: ExpiredToken: ASIAY34FZKBOKMUTVV7A is no longer valid"),
    Case("aws-secret-assignment", "SECRET", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
         tb("session = boto3.Session(**creds)",
            "ValueError: bad creds {'aws_secret_access_key': "
            "'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'}")),
    Case("github-pat-classic", "API-KEY", "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
         tb("gh = Github(token)",
            "github.GithubException.BadCredentialsException: 401 "
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a")),
    Case("github-pat-fine", "API-KEY",
         "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQR",
         "fatal: could not read Password for 'https://github.com': token "
         "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQR"),
    Case("github-oauth", "API-KEY", "gho_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAbCd",
         "KeyError: 'gho_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAbCd'"),
    Case("github-app", "API-KEY", "ghs_Zy9xWv8uTs7rQp6oNm5lKj4iHg3fEd2cBa1Z",
         "httpx.HTTPStatusError: 403 for installation token "
         "ghs_Zy9xWv8uTs7rQp6oNm5lKj4iHg3fEd2cBa1Z"),
    Case("slack-bot", "API-KEY", "xoxb-2048-4096-AbCdEfGhIjKlMnOpQrStUvWx",
         tb("slack.chat_postMessage(channel=ch, text=msg)",
            "slack_sdk.errors.SlackApiError: invalid_auth for "
            "xoxb-2048-4096-AbCdEfGhIjKlMnOpQrStUvWx")),
    Case("slack-user", "API-KEY", "xoxp-1234567890-0987654321-AbCdEfGhIj",
         "ERROR slack token xoxp-1234567890-0987654321-AbCdEfGhIj revoked"),
    Case("slack-app", "API-KEY", "xapp-1-A0123BCDEFG-1234567890123-abcdef0123456789",
         "socket mode failed: xapp-1-A0123BCDEFG-1234567890123-abcdef0123456789"),
    Case("stripe-live", "API-KEY", "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
         tb("stripe.Charge.create(amount=amount, currency='usd')",
            "stripe.error.AuthenticationError: No such API key: sk_live_4eC39HqLyjWDarjtT1zdp7dc")),
    Case("google-api", "API-KEY", "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe",
         "googleapiclient.errors.HttpError: 400 key=AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"),
    Case("gitlab", "API-KEY", "glpat-x9Yz8Wv7Ut6Sr5Qp4On3",
         "gitlab.exceptions.GitlabAuthenticationError: 401 with glpat-x9Yz8Wv7Ut6Sr5Qp4On3"),
    Case("npm", "API-KEY", "npm_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
         "npm ERR! 403 token npm_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 lacks publish rights"),
    Case("huggingface", "API-KEY", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
         "huggingface_hub.utils.HfHubHTTPError: 401 hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"),
    Case("bearer-header", "TOKEN", "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA",
         tb("r = requests.get(url, headers=headers)",
            "requests.exceptions.HTTPError: 401 for headers {'Authorization': "
            "'Bearer Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA'}")),
    Case("bearer-inline", "TOKEN", "d41d8cd98f00b204e9800998ecf8427eXYZ",
         "curl: (22) 403 with -H Bearer d41d8cd98f00b204e9800998ecf8427eXYZ"),
    Case("basic-auth", "TOKEN", "YWxpY2U6czNjcjN0UGFzcw==",
         "urllib.error.HTTPError: 401 Authorization: Basic YWxpY2U6czNjcjN0UGFzcw=="),
    Case("password-kv", "SECRET", "Tr0ub4dor&3",
         tb("conn = psycopg.connect(host=h, password=pw)",
            "psycopg.OperationalError: auth failed, password=Tr0ub4dor&3 rejected")),
    Case("password-json", "SECRET", "correct horse battery staple",
         'json payload {"username": "svc", "password": "correct horse battery staple"} refused'),
    Case("client-secret", "SECRET", "9f8e7d6c5b4a39281706",
         "oauthlib.oauth2.rfc6749.errors.InvalidClientError: "
         "client_secret: '9f8e7d6c5b4a39281706'"),
    Case("api-key-query", "SECRET", "a1b2c3d4e5f60718",
         "httpx.HTTPStatusError: 403 for url /v1/data?api_key=a1b2c3d4e5f60718&page=2"),
    Case("session-cookie", "SECRET", "s%3Aj9Ab8Cd7.Ef6Gh5Ij4",
         "werkzeug BadRequest: cookie=s%3Aj9Ab8Cd7.Ef6Gh5Ij4 could not be decoded"),
    Case("high-entropy", "SECRET", "Q2hhbmdlTWUhN0xvbmdSYW5kb21TZWNyZXQ5OTk3Mg",
         "KeyError: 'Q2hhbmdlTWUhN0xvbmdSYW5kb21TZWNyZXQ5OTk3Mg'"),
    # --- URLs ---------------------------------------------------------------------------------
    Case("url-credentials", "CREDENTIALS", "deploy:hunter2",
         tb("repo.remote().fetch()",
            "git.exc.GitCommandError: fetch "
            "https://deploy:hunter2@git.example.com/app.git failed")),
    Case("postgres-url", "DB-URL", "appuser:s3cr3t@db-primary.prod.internal",
         tb("engine = create_engine(settings.DATABASE_URL)",
            "sqlalchemy.exc.OperationalError: could not connect to "
            "postgresql+asyncpg://appuser:s3cr3t@db-primary.prod.internal:5432/butlers")),
    Case("mysql-url", "DB-URL", "root:toor@10.1.2.3",
         "pymysql.err.OperationalError: (2003) mysql://root:toor@10.1.2.3:3306/shop"),
    Case("mongodb-url", "DB-URL", "admin:pa55@cluster0.ab1cd.mongodb.net",
         "pymongo.errors.ServerSelectionTimeoutError: "
         "mongodb+srv://admin:pa55@cluster0.ab1cd.mongodb.net/prod timed out"),
    Case("redis-url", "DB-URL", ":redispass@cache.internal",
         "redis.exceptions.ConnectionError: redis://:redispass@cache.internal:6379/0 refused"),
    Case("amqp-url", "DB-URL", "guest:guest@mq.internal",
         "aio_pika error amqp://guest:guest@mq.internal:5672/vhost closed"),
    Case("slack-webhook", "WEBHOOK-URL", "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
         "httpx.HTTPStatusError: 404 for https://hooks.slack.com/services/T00000000/B00000000/"
         "XXXXXXXXXXXXXXXXXXXXXXXX"),
    Case("discord-webhook", "WEBHOOK-URL", "1234567890/AbCdEfGhIjKlMnOp-QrStUvWx",
         "aiohttp.ClientResponseError: 401 https://discord.com/api/webhooks/1234567890/"
         "AbCdEfGhIjKlMnOp-QrStUvWx"),
    # --- keys -----------------------------------------------------------------------------------
    Case("rsa-private-key", "PRIVATE-KEY", "MIIEowIBAAKCAQEA7bq98sQ",
         "ValueError: could not load key:\n-----BEGIN RSA PRIVATE KEY-----\n"
         "MIIEowIBAAKCAQEA7bq98sQ\nx9Yz8Wv7Ut6Sr5Qp4On3Ml2Kj1Ih0Gf\n"
         "-----END RSA PRIVATE KEY-----\n"),
    Case("openssh-private-key", "PRIVATE-KEY", "b3BlbnNzaC1rZXktdjEAAAAA",
         "paramiko.ssh_exception.SSHException: bad key\n-----BEGIN OPENSSH PRIVATE KEY-----\n"
         "b3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"),
    Case("ec-key-truncated", "PRIVATE-KEY", "MHcCAQEEIBkg4LVWM9nuwNSk",
         "cryptography error loading -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk"),
    # --- personal data ------------------------------------------------------------------------
    Case("email", "EMAIL", "jane.doe@gmail.com",
         tb("await send_welcome(user.email)",
            "smtplib.SMTPRecipientsRefused: {'jane.doe@gmail.com': (550, b'No such user')}")),
    Case("email-plus", "EMAIL", "j.smith+billing@mail.acme-corp.co.uk",
         "ValueError: duplicate account for j.smith+billing@mail.acme-corp.co.uk"),
    Case("phone-us", "PHONE", "(415) 555-0132",
         "twilio.base.exceptions.TwilioRestException: unable to reach (415) 555-0132"),
    Case("phone-intl", "PHONE", "+44 20 7946 0958",
         tb("sms.send(to=contact.phone, body=text)",
            "ValueError: invalid destination +44 20 7946 0958 for region")),
    Case("phone-dashes", "PHONE", "212-555-0187",
         "IntegrityError: duplicate key (phone)=(212-555-0187) already exists"),
    Case("card", "CARD", "4111 1111 1111 1111",
         "stripe.error.CardError: card 4111 1111 1111 1111 was declined"),
    Case("card-plain", "CARD", "5555555555554444",
         "ValueError: unexpected PAN 5555555555554444 in log line"),
    Case("ssn", "SSN", "078-05-1120",
         "pydantic.ValidationError: ssn '078-05-1120' does not match pattern"),
    Case("uuid-user", "UUID", "3f0c2a6e-8b1d-4c7e-9a5f-2d4b6c8e0a1b",
         tb("user = await repo.get(user_id)",
            "app.errors.NotFound: user 3f0c2a6e-8b1d-4c7e-9a5f-2d4b6c8e0a1b not found")),
    # --- machines -----------------------------------------------------------------------------
    Case("ipv4-private", "IP", "10.20.30.40",
         tb("sock.connect((host, port))",
            "ConnectionRefusedError: [Errno 111] Connect call failed ('10.20.30.40', 8080)")),
    Case("ipv4-public", "IP", "203.0.113.77",
         "httpx.ConnectTimeout: 203.0.113.77:443 timed out"),
    Case("ipv6", "IP", "2001:db8:85a3::8a2e:370:7334",
         "OSError: [Errno 101] Network unreachable: 2001:db8:85a3::8a2e:370:7334"),
    Case("ipv6-full", "IP", "fe80:0000:0000:0000:0202:b3ff:fe1e:8329",
         "socket.gaierror for fe80:0000:0000:0000:0202:b3ff:fe1e:8329"),
    Case("home-linux", "HOME-PATH", "/home/alice",
         'Traceback (most recent call last):\n  File "/home/alice/.local/lib/helper.py", '
         "line 3, in run\nFileNotFoundError: /home/alice/notes/todo.txt"),
    Case("home-mac", "HOME-PATH", "/Users/bob",
         "PermissionError: [Errno 13] Permission denied: '/Users/bob/Library/Keychains/login'"),
    Case("home-windows", "HOME-PATH", "C:\\Users\\carol",
         "FileNotFoundError: C:\\Users\\carol\\AppData\\Local\\app\\config.ini"),
    Case("hostname-internal", "HOST", "db-primary.prod.internal",
         "psycopg.OperationalError: could not translate host name db-primary.prod.internal"),
    Case("hostname-company", "HOST", "grafana.acme-corp.com",
         "httpx.ConnectError: https://grafana.acme-corp.com/api/dashboards unreachable"),
    Case("hostname-bare", "HOST", "build-07.ci.acme.io",
         "ssh: connect to host build-07.ci.acme.io port 22: Connection timed out"),
]

# Ordinary text that must come through untouched.
HARMLESS = [
    "Unexpected error",
    "RuntimeError: Unexpected error while processing the batch",
    "commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f broke it (short 3f2a9c1)",
    "requires python>=3.11, healer 0.1.0, numpy 1.26.4, v2.10.0-rc1",
    "listening on 127.0.0.1:8083 and [::1]:8083, also http://localhost:8083/health",
    "bound to 0.0.0.0:9000",
    "at 2024-05-01T10:00:00Z after 12:30:45.123 (took 1.5 s)",
    'File "src/butlers/modules/memory/tools/facts.py", line 42, in memory_store_fact',
    "asyncpg.exceptions.UndefinedTableError: relation \"butler_name.missing_table\" does not exist",
    "KeyError: 'token'",
    "def login(token: str, password: str | None = None) -> Session:",
    "self.net(x) request.app.state.settings.api_key",
    "see https://docs.python.org/3/library/re.html and https://github.com/org/repo/pull/7",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "TestSanitizerRedactsEverythingInTheCorpus passed in 0.42 s",
    "mail from noreply@anthropic.com",
    "listening on api.payments.example.com and svc.internal.test",
    "line 1234, in <module>  [Previous line repeated 996 more times]",
]
