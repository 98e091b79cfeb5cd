"""`python tests/gcs_emulator.py start ...`: gcp-storage-emulator as the tests run it.

Real GCS sends an object's generation with its bytes (`x-goog-generation`); the emulator
does not, so tensorstore reads generation 0, and its next conditional write of the same
object (an OCDBT manifest that orbax updates) fails with "Malformed StorageGeneration". The
download handler is wrapped to add the headers before the server binds its routes.
"""

import sys
from http import HTTPStatus

from gcp_storage_emulator.handlers import objects

_download = objects.download


def _download_with_generation(request, response, storage, *args, **kwargs):
  _download(request, response, storage, *args, **kwargs)
  if response.status in (HTTPStatus.OK, HTTPStatus.PARTIAL_CONTENT):
    obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
    response["x-goog-generation"] = str(obj["generation"])
    response["x-goog-metageneration"] = str(obj["metageneration"])


objects.download = _download_with_generation

from gcp_storage_emulator.__main__ import main  # noqa: E402 - binds the wrapped handler

if __name__ == "__main__":
  main(sys.argv[1:])
