#!/usr/bin/env python3
"""A KServe v2 gRPC server written with another gRPC implementation than Quetta's: Python's
grpcio and the GRPCInferenceService stubs that PyPI's `tritonclient` generates from Triton's
own protobuf files. It serves one decoupled model shaped like TensorRT-LLM's ensemble
(`text_input`, `max_tokens`, `stream`, `min_length`, `temperature`, `top_p`, `random_seed`
in; `text_output` out), streaming one response per token, so that a misreading of the
protocol shared by Quetta's client and Quetta's simulator cannot pass both.

Usage: kserve-grpc-server.py [--port N] [--ttft-ms T] [--itl-ms I] [--api-key K] [--log F]
                             [--without-input NAME] [--vllm | --ids]
                             [--tls-cert PEM --tls-key PEM]
Prints `listening on PORT` once it serves. With --log, one JSON line per request: its id,
the monotonic instant its request was read, the instant before each response was handed to
gRPC (`sends_ns`) and the instant gRPC gave control back once its send had completed
(`written_ns`): nanoseconds on CLOCK_MONOTONIC, the clock Rust's Instant reads. A response's
bytes left between the two.

--vllm serves a model shaped like Triton's vLLM backend instead, named `vllm_model`
(`text_input`, `stream`, `sampling_parameters` as a JSON string, `exclude_input_in_output`;
`max_tokens` from the sampling parameters, vLLM's 16 without one; an unknown sampling
parameter refused as vLLM refuses it).
--ids serves a model shaped like TensorRT-LLM's `tensorrt_llm` model, named `tensorrt_llm`
(`input_ids` INT32 [1,n], `input_lengths`, `request_output_len`, `streaming`, optional
`min_tokens`; `output_ids` out, one INT32 id a response: 1000 + the token's index), and
refuses a request whose `input_lengths` is not its count of ids.
--tls-cert and --tls-key serve over TLS (grpcs://) with that certificate chain and key.
--without-input leaves an input out of the model (its metadata, and the inputs it takes).
A prompt containing FAIL_AFTER_2 gets two tokens, then a response with `error_message`
(Triton's way of failing a decoupled request).
"""

import argparse
import json
import struct
import sys
import threading
import time
from concurrent import futures

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

MODEL = "ensemble"
INPUTS = {
    "text_input": "BYTES",
    "max_tokens": "INT32",
    "stream": "BOOL",
    "min_length": "INT32",
    "temperature": "FP32",
    "top_p": "FP32",
    "random_seed": "UINT64",
}
VLLM_INPUTS = {
    "text_input": "BYTES",
    "stream": "BOOL",
    "sampling_parameters": "BYTES",
    "exclude_input_in_output": "BOOL",
}
IDS_INPUTS = {
    "input_ids": "INT32",
    "input_lengths": "INT32",
    "request_output_len": "INT32",
    "streaming": "BOOL",
    "min_tokens": "INT32",
}
VLLM_SAMPLING = {"max_tokens", "min_tokens", "ignore_eos", "temperature", "top_p", "seed"}
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"]


def bytes_elements(raw):
    out = []
    while raw:
        (n,) = struct.unpack_from("<I", raw)
        out.append(raw[4 : 4 + n])
        raw = raw[4 + n :]
    return out


class Service(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, args):
        self.args = args
        self.log = open(args.log, "a") if args.log else None
        self.lock = threading.Lock()

    def _auth(self, context):
        """Every call checks the key, as a gateway in front of Triton does."""
        if self.args.api_key is None:
            return True
        md = dict(context.invocation_metadata())
        if md.get("authorization") != "Bearer " + self.args.api_key:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid API key")
        return True

    def ServerLive(self, request, context):
        self._auth(context)
        return service_pb2.ServerLiveResponse(live=True)

    def ServerReady(self, request, context):
        self._auth(context)
        return service_pb2.ServerReadyResponse(ready=True)

    def ModelReady(self, request, context):
        self._auth(context)
        return service_pb2.ModelReadyResponse(ready=request.name == MODEL)

    def ModelMetadata(self, request, context):
        self._auth(context)
        if request.name != MODEL:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{request.name}' is not found")
        t = service_pb2.ModelMetadataResponse.TensorMetadata
        return service_pb2.ModelMetadataResponse(
            name=MODEL,
            versions=["1"],
            platform="tensorrtllm" if MODEL == "tensorrt_llm" else "ensemble",
            inputs=[t(name=n, datatype=d, shape=[-1, 1]) for n, d in INPUTS.items()],
            outputs=[
                t(name="output_ids", datatype="INT32", shape=[-1, -1])
                if MODEL == "tensorrt_llm"
                else t(name="text_output", datatype="BYTES", shape=[-1, -1])
            ],
        )

    def _parse(self, req):
        """The request's inputs, or an error message in Triton's words."""
        if req.model_name != MODEL:
            return None, f"Request for unknown model: '{req.model_name}' is not found"
        if len(req.raw_input_contents) != len(req.inputs):
            return None, "expected raw_input_contents for every input"
        values = {}
        for t, raw in zip(req.inputs, req.raw_input_contents):
            if t.name not in INPUTS:
                return None, f"[request id: {req.id}] unexpected inference input '{t.name}' for model '{MODEL}'"
            if t.datatype != INPUTS[t.name]:
                return None, f"[request id: {req.id}] inference input '{t.name}' data-type is '{t.datatype}', but model '{MODEL}' expects '{INPUTS[t.name]}'"
            if t.datatype == "BYTES":
                values[t.name] = b"".join(bytes_elements(raw)).decode()
            elif t.datatype == "INT32" and t.name == "input_ids":
                if list(t.shape) != [1, len(raw) // 4] or len(raw) % 4:
                    return None, f"[request id: {req.id}] unexpected shape for input 'input_ids' for model '{MODEL}'"
                values[t.name] = list(struct.unpack(f"<{len(raw) // 4}i", raw))
            elif t.datatype == "INT32":
                values[t.name] = struct.unpack("<i", raw)[0]
            elif t.datatype == "BOOL":
                values[t.name] = raw[0] != 0
            elif t.datatype == "FP32":
                values[t.name] = struct.unpack("<f", raw)[0]
            else:
                values[t.name] = struct.unpack("<Q", raw)[0]
        if MODEL == "tensorrt_llm":
            if values.get("input_lengths") != len(values.get("input_ids", [])):
                return None, f"[request id: {req.id}] input_lengths {values.get('input_lengths')} is not the {len(values.get('input_ids', []))} input_ids"
            values["max_tokens"] = values.get("request_output_len")
            values["stream"] = values.get("streaming")
            values["text_input"] = ""
        if MODEL == "vllm_model":
            try:
                sp = json.loads(values.get("sampling_parameters", "{}"))
            except ValueError:
                return None, f"[request id: {req.id}] sampling_parameters is not JSON"
            unknown = set(sp) - VLLM_SAMPLING
            if unknown:
                return None, f"[request id: {req.id}] unexpected keyword argument '{sorted(unknown)[0]}'"
            values["max_tokens"] = sp.get("max_tokens", 16)
            values["sampling_parameters"] = sp
        if "text_input" not in values or "max_tokens" not in values:
            return None, f"[request id: {req.id}] expected 3 inputs but got {len(values)} inputs for model '{MODEL}'"
        return values, None

    def _response(self, req, word, final, index=0):
        r = service_pb2.ModelInferResponse(model_name=MODEL, model_version="1", id=req.id)
        if word is not None and MODEL == "tensorrt_llm":
            out = r.outputs.add()
            out.name, out.datatype = "output_ids", "INT32"
            n = len(word.split()) if index < 0 else 1
            out.shape.extend([1, 1, n])
            r.raw_output_contents.append(struct.pack(f"<{n}i", *[1000 + i for i in range(n)]))
        elif word is not None:
            out = r.outputs.add()
            out.name, out.datatype = "text_output", "BYTES"
            out.shape.extend([1, 1])
            b = word.encode()
            r.raw_output_contents.append(struct.pack("<I", len(b)) + b)
        if final:
            r.parameters["triton_final_response"].bool_param = True
        return r

    def _write_log(self, rec):
        if self.log:
            with self.lock:
                self.log.write(json.dumps(rec) + "\n")
                self.log.flush()

    def ModelStreamInfer(self, request_iterator, context):
        self._auth(context)
        for req in request_iterator:
            arrival = time.monotonic_ns()
            values, err = self._parse(req)
            if err:
                yield service_pb2.ModelStreamInferResponse(error_message=err)
                continue
            n = values["max_tokens"]
            empty_final = req.parameters["triton_enable_empty_final_response"].bool_param
            sends, written = [], []
            time.sleep(self.args.ttft_ms / 1e3)
            for i in range(n):
                if i > 0:
                    time.sleep(self.args.itl_ms / 1e3)
                if "FAIL_AFTER_2" in values["text_input"] and i == 2:
                    yield service_pb2.ModelStreamInferResponse(error_message="model crashed (FAIL_AFTER_2)")
                    break
                word = " " + WORDS[i % len(WORDS)]
                last = i == n - 1 and not empty_final
                sends.append(time.monotonic_ns())
                yield service_pb2.ModelStreamInferResponse(infer_response=self._response(req, word, last, i))
                # grpcio resumes the generator once the message's send has completed
                written.append(time.monotonic_ns())
            else:
                if empty_final:
                    yield service_pb2.ModelStreamInferResponse(infer_response=self._response(req, None, True))
            self._write_log({"id": req.id, "arrival_ns": arrival, "sends_ns": sends, "written_ns": written, "stream": values.get("stream"), "sampling_parameters": values.get("sampling_parameters")})

    def ModelInfer(self, request, context):
        self._auth(context)
        values, err = self._parse(request)
        if err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, err)
        n = values["max_tokens"]
        time.sleep((self.args.ttft_ms + self.args.itl_ms * max(n - 1, 0)) / 1e3)
        text = "".join(" " + WORDS[i % len(WORDS)] for i in range(n))
        self._write_log({"id": request.id, "arrival_ns": time.monotonic_ns(), "sends_ns": [], "written_ns": [], "stream": False})
        return self._response(request, text, False, -1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=5.0)
    p.add_argument("--itl-ms", type=float, default=1.0)
    p.add_argument("--api-key")
    p.add_argument("--log")
    p.add_argument("--without-input")
    p.add_argument("--vllm", action="store_true")
    p.add_argument("--ids", action="store_true")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    args = p.parse_args()
    global MODEL
    if args.ids:
        MODEL = "tensorrt_llm"
        INPUTS.clear()
        INPUTS.update(IDS_INPUTS)
    if args.vllm:
        MODEL = "vllm_model"
        INPUTS.clear()
        INPUTS.update(VLLM_INPUTS)
    INPUTS.pop(args.without_input, None)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Service(args), server)
    if args.tls_cert:
        with open(args.tls_key, "rb") as k, open(args.tls_cert, "rb") as c:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())])
        port = server.add_secure_port(f"127.0.0.1:{args.port}", creds)
    else:
        port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    print(f"listening on {port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    sys.exit(main())
