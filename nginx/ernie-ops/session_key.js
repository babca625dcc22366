// The session key of an API request, for nginx's njs (`js_content`): the X-Session-Id header (the chat app sends its
// thread id), else OpenAI's `user` field of the JSON body. A request with a key continues at @keyed (a consistent hash
// of the key: one replica, or behind the edge one host, and its prefix cache), one without at @balanced.
// The body is read before this runs; njs sees it when it is in memory (client_body_buffer_size: 256 KB), and parses it
// only when it holds `"user"`. Cost, benchmarks/session_key_cost.py: 26-37 us of nginx CPU per request (a 73-77 us
// proxied request without njs). Installed unchanged by the gateway's and the edge's roles.

const MAX_KEY = 256;  // longer is not a session key anyone needs; the hash sees its first 256 characters

function sessionKey(r) {
    const header = r.headersIn['X-Session-Id'];
    if (header) {
        return header;
    }
    const body = r.requestText;
    if (!body || body.indexOf('"user"') < 0) {
        return '';
    }
    try {
        const user = JSON.parse(body).user;
        return typeof user === 'string' ? user : '';
    } catch (e) {
        return '';  // not JSON: vLLM answers it with its 400
    }
}

function route(r) {
    const key = sessionKey(r).slice(0, MAX_KEY);
    if (key) {
        r.variables.ernie_session_key = key;
        r.internalRedirect('@keyed');
    } else {
        r.internalRedirect('@balanced');
    }
}

export default { route };
