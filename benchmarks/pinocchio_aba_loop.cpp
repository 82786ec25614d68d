// Pinocchio's forward dynamics (`pinocchio::aba`) over a batch of states, from C++: the peer
// without Python's per-call cost. `pinocchio_cpp.py` compiles this into a shared library
// (Pinocchio's headers, instantiated and inlined here) and calls it through ctypes, so that the
// benchmarks can time it in turn with simjax and the Python loop.
//
// The model file (text, whitespace separated), dumped from the Python model the other
// benchmarks use (Pinocchio's own joints, placements and inertias):
//   njoints (excluding the universe) nq nv
//   per joint: kind parent R(9, row-major) p(3) mass lever(3) inertia about the com
//              (6: xx xy yy xz yz zz) [axis(3) for the unaligned kinds]
//   gravity(3)
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "pinocchio/algorithm/aba.hpp"
#include "pinocchio/algorithm/joint-configuration.hpp"
#include "pinocchio/multibody.hpp"

namespace pin = pinocchio;

namespace {
pin::JointModel make_joint(const std::string &kind, std::istream &in) {
  if (kind == "JointModelRX") return pin::JointModelRX();
  if (kind == "JointModelRY") return pin::JointModelRY();
  if (kind == "JointModelRZ") return pin::JointModelRZ();
  if (kind == "JointModelPX") return pin::JointModelPX();
  if (kind == "JointModelPY") return pin::JointModelPY();
  if (kind == "JointModelPZ") return pin::JointModelPZ();
  if (kind == "JointModelRUBX") return pin::JointModelRUBX();
  if (kind == "JointModelRUBY") return pin::JointModelRUBY();
  if (kind == "JointModelRUBZ") return pin::JointModelRUBZ();
  if (kind == "JointModelFreeFlyer") return pin::JointModelFreeFlyer();
  if (kind == "JointModelSpherical") return pin::JointModelSpherical();
  if (kind == "JointModelRevoluteUnaligned" || kind == "JointModelPrismaticUnaligned") {
    Eigen::Vector3d axis;
    in >> axis[0] >> axis[1] >> axis[2];
    if (kind == "JointModelRevoluteUnaligned") return pin::JointModelRevoluteUnaligned(axis);
    return pin::JointModelPrismaticUnaligned(axis);
  }
  throw std::runtime_error("pinocchio_aba_loop: joint kind " + kind + " is not handled");
}


struct Loop {
  pin::Model model;
  pin::Data data;
  Eigen::VectorXd tau;
  explicit Loop(const pin::Model &m) : model(m), data(m), tau(Eigen::VectorXd::Zero(m.nv)) {}
};

pin::Model read_model(const char *path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(std::string("cannot open ") + path);
  int nj, nq, nv;
  in >> nj >> nq >> nv;
  pin::Model model;
  for (int j = 0; j < nj; ++j) {
    std::string kind;
    int parent;
    Eigen::Matrix3d R;
    Eigen::Vector3d p, c;
    double m, I[6];
    in >> kind >> parent;
    for (int k = 0; k < 9; ++k) in >> R(k / 3, k % 3);
    in >> p[0] >> p[1] >> p[2] >> m >> c[0] >> c[1] >> c[2];
    for (double &x : I) in >> x;
    pin::JointModel jm = make_joint(kind, in);
    auto id = model.addJoint(static_cast<pin::JointIndex>(parent), jm, pin::SE3(R, p), "j" + std::to_string(j));
    model.appendBodyToJoint(id, pin::Inertia(m, c, pin::Symmetric3(I[0], I[1], I[2], I[3], I[4], I[5])),
                            pin::SE3::Identity());
  }
  Eigen::Vector3d g;
  in >> g[0] >> g[1] >> g[2];
  model.gravity.linear(g);
  if (!in) throw std::runtime_error(std::string(path) + " ended early");
  if (model.nq != nq || model.nv != nv)
    throw std::runtime_error("the model built has other nq/nv than " + std::string(path) + " says");
  return model;
}

}  // namespace

#define SJ_API __attribute__((visibility("default")))

extern "C" {

// The model in `path`, ready for `sj_pin_aba`; null with the reason in `err` if it cannot be read.
SJ_API void *sj_pin_load(const char *path, char *err, int errlen) {
  try {
    return new Loop(read_model(path));
  } catch (const std::exception &e) {
    std::strncpy(err, e.what(), static_cast<size_t>(errlen - 1));
    err[errlen - 1] = 0;
    return nullptr;
  }
}

SJ_API int sj_pin_nq(void *h) { return static_cast<Loop *>(h)->model.nq; }
SJ_API int sj_pin_nv(void *h) { return static_cast<Loop *>(h)->model.nv; }

// Forward dynamics of `batch` states: Q (batch x nq), V and A (batch x nv), row-major; joint
// torques -damping .* v (zero where `damping` is null). One `pinocchio::aba` call per state, as
// a C++ user loops.
SJ_API void sj_pin_aba(void *h, int batch, const double *Q, const double *V, const double *damping, double *A) {
  Loop &L = *static_cast<Loop *>(h);
  const int nq = L.model.nq, nv = L.model.nv;
  for (int i = 0; i < batch; ++i) {
    Eigen::Map<const Eigen::VectorXd> q(Q + static_cast<std::ptrdiff_t>(i) * nq, nq);
    Eigen::Map<const Eigen::VectorXd> v(V + static_cast<std::ptrdiff_t>(i) * nv, nv);
    if (damping) L.tau = -(Eigen::Map<const Eigen::VectorXd>(damping, nv).array() * v.array()).matrix();
    Eigen::Map<Eigen::VectorXd>(A + static_cast<std::ptrdiff_t>(i) * nv, nv) = pin::aba(L.model, L.data, q, v, L.tau);
  }
}

// `steps` classical Runge-Kutta steps of `dt` from each of `batch` states (Q, V row-major, as
// above; overwritten with the final states), no joint torques: each stage one `pinocchio::aba`,
// positions moved along the configuration space with `pinocchio::integrate` (for revolute and
// prismatic joints, plain RK4 in the coordinates; on a free flyer's group, without the
// correction of higher-order Lie-group methods, a second-order method). One state's whole run
// after another, as a C++ user loops over a batch of simulations.
SJ_API void sj_pin_rk4(void *h, int batch, int steps, double dt, double *Q, double *V) {
  Loop &L = *static_cast<Loop *>(h);
  const pin::Model &m = L.model;
  pin::Data &d = L.data;
  const int nq = m.nq, nv = m.nv;
  Eigen::VectorXd qs(nq), v2(nv), v3(nv), v4(nv), a1(nv), a2(nv), a3(nv), a4(nv), dq(nv);
  const Eigen::VectorXd tau = Eigen::VectorXd::Zero(nv);
  for (int i = 0; i < batch; ++i) {
    Eigen::Map<Eigen::VectorXd> q(Q + static_cast<std::ptrdiff_t>(i) * nq, nq);
    Eigen::Map<Eigen::VectorXd> v(V + static_cast<std::ptrdiff_t>(i) * nv, nv);
    for (int k = 0; k < steps; ++k) {
      a1 = pin::aba(m, d, q, v, tau);
      v2 = v + 0.5 * dt * a1;
      pin::integrate(m, q, (0.5 * dt) * v, qs);
      a2 = pin::aba(m, d, qs, v2, tau);
      v3 = v + 0.5 * dt * a2;
      pin::integrate(m, q, (0.5 * dt) * v2, qs);
      a3 = pin::aba(m, d, qs, v3, tau);
      v4 = v + dt * a3;
      pin::integrate(m, q, dt * v3, qs);
      a4 = pin::aba(m, d, qs, v4, tau);
      dq = (dt / 6.0) * (v + 2.0 * v2 + 2.0 * v3 + v4);
      pin::integrate(m, q, dq, qs);
      q = qs;
      v += (dt / 6.0) * (a1 + 2.0 * a2 + 2.0 * a3 + a4);
    }
  }
}

SJ_API void sj_pin_free(void *h) { delete static_cast<Loop *>(h); }

}  // extern "C"
