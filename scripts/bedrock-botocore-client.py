#!/usr/bin/env python3
"""AWS's own Python SDK (botocore) against a Bedrock runtime: the independent side of
Quetta's Bedrock tests. botocore signs each request with its SigV4 signer and parses the
answer's event stream with its own parser, so a fake whose signature check or frames
disagree with AWS's SDK fails here, whatever Quetta's adapter believes.

Credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN), the region from --region. Prints one JSON line per call:

  converse MODEL N   ConverseStream: the text deltas, stop reason, usage and latencyMs
  invoke MODEL N     InvokeModelWithResponseStream with Anthropic's Messages body: the
                     chunks' text deltas and the invocation metrics
  converse-whole MODEL N   Converse
  tampered MODEL     a ConverseStream request signed by botocore whose body is changed
                     after signing: the service's error code and HTTP status
"""

import argparse
import json
import sys

import botocore.config
import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
import urllib.request
import urllib.error
import urllib.parse


def client(endpoint, region):
    s = botocore.session.get_session()
    cfg = botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"})
    return s.create_client("bedrock-runtime", endpoint_url=endpoint, region_name=region,
                           config=cfg)


def converse(c, model, n):
    r = c.converse_stream(
        modelId=model,
        messages=[{"role": "user", "content": [{"text": "tell me about event streams"}]}],
        system=[{"text": "answer in few words"}],
        inferenceConfig={"maxTokens": n},
    )
    deltas, out = [], {}
    for ev in r["stream"]:
        if "contentBlockDelta" in ev:
            deltas.append(ev["contentBlockDelta"]["delta"]["text"])
        elif "messageStop" in ev:
            out["stop"] = ev["messageStop"]["stopReason"]
        elif "metadata" in ev:
            out["usage"] = ev["metadata"]["usage"]
            out["latency_ms"] = ev["metadata"]["metrics"]["latencyMs"]
    out["deltas"] = deltas
    return out


def converse_whole(c, model, n):
    r = c.converse(
        modelId=model,
        messages=[{"role": "user", "content": [{"text": "tell me"}]}],
        inferenceConfig={"maxTokens": n},
    )
    return {
        "text": r["output"]["message"]["content"][0]["text"],
        "stop": r["stopReason"],
        "usage": r["usage"],
        "latency_ms": r["metrics"]["latencyMs"],
    }


def invoke(c, model, n):
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": n,
        "messages": [{"role": "user", "content": "tell me about event streams"}],
    }
    r = c.invoke_model_with_response_stream(modelId=model, body=json.dumps(body))
    deltas, out = [], {}
    for ev in r["body"]:
        obj = json.loads(ev["chunk"]["bytes"])
        if obj.get("type") == "content_block_delta":
            deltas.append(obj["delta"]["text"])
        if "amazon-bedrock-invocationMetrics" in obj:
            out["metrics"] = obj["amazon-bedrock-invocationMetrics"]
    out["deltas"] = deltas
    return out


def tampered(endpoint, region, model):
    s = botocore.session.get_session()
    creds = s.get_credentials().get_frozen_credentials()
    path = "/model/" + urllib.parse.quote(model, safe="") + "/converse-stream"
    body = json.dumps({"messages": [{"role": "user", "content": [{"text": "hi"}]}]})
    req = AWSRequest(method="POST", url=endpoint + path, data=body,
                     headers={"content-type": "application/json"})
    SigV4Auth(creds, "bedrock", region).add_auth(req)
    prepared = req.prepare()
    # the body changes after signing: the signature no longer covers it
    data = body.replace("hi", "ho").encode()
    r = urllib.request.Request(prepared.url, data=data, method="POST",
                               headers=dict(prepared.headers.items()))
    try:
        with urllib.request.urlopen(r) as resp:
            return {"status": resp.status}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "error_type": e.headers.get("x-amzn-ErrorType", "").split(":")[0]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--region", required=True)
    p.add_argument("call", choices=["converse", "converse-whole", "invoke", "tampered"])
    p.add_argument("model")
    p.add_argument("n", nargs="?", type=int, default=8)
    a = p.parse_args()
    if a.call == "tampered":
        out = tampered(a.endpoint, a.region, a.model)
    else:
        c = client(a.endpoint, a.region)
        out = {"converse": converse, "converse-whole": converse_whole, "invoke": invoke}[a.call](
            c, a.model, a.n)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
