"""Writes tests/data/synthetic_joints.osim with OpenSim's API (every joint kind the real models
lack, a CustomJoint with Polynomial/SimmSpline/Multiplier functions, an offset-frame marker,
Point/Weld/Coupler constraints and a locked coordinate). Run once; OpenSim segfaults while
tearing the model down at exit, after the file is written."""

import numpy as np
import opensim as osim

_keep = []


def build(path):
    m = osim.Model()
    m.setName("synthetic")
    m.setGravity(osim.Vec3(0.3, -9.81, 0.2))
    rng = np.random.default_rng(1)

    def body(name):
        b = osim.Body(
            name,
            float(rng.uniform(0.5, 2)),
            osim.Vec3(*rng.normal(0, 0.1, 3)),
            osim.Inertia(0.1, 0.12, 0.09, 0.01, -0.005, 0.003),
        )
        m.addBody(b)
        return b

    V = lambda *a: osim.Vec3(*a)
    parent = m.getGround()
    specs = [
        ("SliderJoint", osim.SliderJoint),
        ("UniversalJoint", osim.UniversalJoint),
        ("GimbalJoint", osim.GimbalJoint),
        ("BallJoint", osim.BallJoint),
        ("PlanarJoint", osim.PlanarJoint),
        ("PinJoint", osim.PinJoint),
    ]
    for k, (_nm, cls) in enumerate(specs):
        b = body(f"b{k}")
        j = cls(
            f"j{k}",
            parent,
            V(*rng.normal(0, 0.3, 3)),
            V(*rng.normal(0, 0.5, 3)),
            b,
            V(*rng.normal(0, 0.3, 3)),
            V(*rng.normal(0, 0.5, 3)),
        )
        m.addJoint(j)
        parent = b
    b = body("ell")
    j = osim.EllipsoidJoint(
        "jell", parent, V(0.1, 0.2, 0), V(0.2, 0, 0.1), b, V(0, 0.1, 0), V(0, 0, 0.3), V(0.3, 0.2, 0.1)
    )
    m.addJoint(j)
    # custom joint: 2 coordinates, spline and polynomial and multiplier functions
    b2 = body("cust")
    st = osim.SpatialTransform()
    ax = st.updTransformAxis(0)
    ax.setCoordinateNames(osim.ArrayStr("ca", 1))
    ax.setAxis(V(0.2, 0.1, 1.0))
    l1 = osim.LinearFunction(1, 0)
    l1.thisown = False
    ax.setFunction(l1)
    ax = st.updTransformAxis(1)
    ax.setCoordinateNames(osim.ArrayStr("cb", 1))
    ax.setAxis(V(1, 0, 0))
    pc = osim.Vector(4, 0.0)
    [pc.set(i, v) for i, v in enumerate([0.3, -0.2, 0.8, 0.05])]
    pf = osim.PolynomialFunction(pc)
    pf.thisown = False
    ax.setFunction(pf)
    sp = osim.SimmSpline()
    [sp.addPoint(x, y) for x, y in [(-2, -0.1), (-1, 0.05), (0, 0), (1, 0.1), (2, 0.0)]]
    ax = st.updTransformAxis(3)
    ax.setCoordinateNames(osim.ArrayStr("ca", 1))
    ax.setAxis(V(1, 0, 0))
    sp.thisown = False
    ax.setFunction(sp)
    ax = st.updTransformAxis(4)
    ax.setCoordinateNames(osim.ArrayStr("cb", 1))
    ax.setAxis(V(0, 1, 0))
    lf = osim.LinearFunction(0.5, 0.1)
    _keep.append(lf)
    mf = osim.MultiplierFunction(lf, 0.3)
    mf.thisown = False
    ax.setFunction(mf)
    cj = osim.CustomJoint(
        "jcust", m.getBodySet().get("b2"), V(0, -0.2, 0), V(0.1, 0, 0), b2, V(0, 0.1, 0), V(0, 0.2, 0), st
    )
    m.addJoint(cj)
    # a free body with a marker on an offset frame
    bf = body("floater")
    m.addJoint(
        osim.FreeJoint("jfree", m.getGround(), V(1, 1, 0), V(0, 0, 0), bf, V(0, 0, 0), V(0.1, 0.2, 0.3))
    )
    off = osim.PhysicalOffsetFrame(
        "tipframe", bf, osim.Transform(osim.Rotation(0.4, osim.CoordinateAxis(2)), V(0.1, 0.2, 0.3))
    )
    bf.addComponent(off)
    m.addMarker(osim.Marker("mk_off", off, V(0.05, 0, 0)))
    m.addMarker(osim.Marker("mk_b3", m.getBodySet().get("b3"), V(0.1, 0.1, 0.1)))
    # constraints: a point constraint floater<->cust, a coupler ca = f(cb), a locked coordinate
    m.addConstraint(osim.PointConstraint(bf, V(0, 0, 0), b2, V(0.1, 0, 0)))
    cc = osim.CoordinateCouplerConstraint()
    cc.setName("cc")
    cc.setIndependentCoordinateNames(osim.ArrayStr("cb", 1))
    cc.setDependentCoordinateName("ca")
    l2 = osim.LinearFunction(0.7, 0.1)
    l2.thisown = False
    cc.setFunction(l2)
    m.addConstraint(cc)
    m.addConstraint(
        osim.WeldConstraint(
            "weld",
            m.getBodySet().get("b0"),
            osim.Transform(V(0.0, 0.1, 0)),
            m.getBodySet().get("b5"),
            osim.Transform(V(0.0, 0.0, 0.1)),
        )
    )
    m.finalizeConnections()
    m.getCoordinateSet().get("j2_coord_1").setDefaultLocked(True) if m.getCoordinateSet().contains(
        "j2_coord_1"
    ) else None
    m.printToXML(str(path))
    return [m.getCoordinateSet().get(i).getName() for i in range(m.getCoordinateSet().getSize())]


if __name__ == "__main__":
    import pathlib

    print(build(pathlib.Path(__file__).with_name("synthetic_joints.osim")))
